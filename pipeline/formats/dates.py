"""Real-calendar date parsing for the formats identity documents print.

Every parser returns `datetime.date` or None: an impossible calendar date (2023-02-30, month 13) is a
misread, never something to round or clamp, because a validated record must not carry a date that the
document does not show.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date
from typing import Literal

LONG_TERM: Literal["long-term"] = "long-term"

_MRZ_WINDOW_YEARS = 50
# No document is issued for longer than this (the longest validity among ICAO issuers: the Belgian eID of a
# holder over 75, 30 years), so no expiry lies further ahead of today than this.
LONGEST_VALIDITY_YEARS = 30


def make_date(year: int, month: int, day: int) -> date | None:
    """`date(year, month, day)` or None when that day does not exist."""
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _shift_years(d: date, years: int) -> date:
    """Same month/day `years` later; 29 Feb falls back to 28 Feb so the window bound always exists."""
    return make_date(d.year + years, d.month, d.day) or date(d.year + years, d.month, 28)


def yymmdd(s: str, *, kind: Literal["birth", "expiry"], today: date) -> date | None:
    """An MRZ `YYMMDD` date with the century inferred.

    MRZ dates carry no century, so it comes from what the date means: a birth date cannot be in the future,
    so it is the most recent century that keeps it <= today; an expiry date lies within
    [today - 50 y, today + 30 y] (archives reach back a few decades; no document is valid for more than
    `LONGEST_VALIDITY_YEARS`), so it is the century whose date falls in that window (the closest to today).
    An expiry beyond it is a misread digit that kept its check digit (one substitution in ten does): None.
    """
    if len(s) != 6 or not s.isdigit():
        return None
    yy, mm, dd = int(s[:2]), int(s[2:4]), int(s[4:])
    candidates = [d for c in (1900, 2000, 2100) if (d := make_date(c + yy, mm, dd)) is not None]
    if not candidates:
        return None
    if kind == "birth":
        past = [d for d in candidates if d <= today]
        return max(past) if past else None
    low, high = _shift_years(today, -_MRZ_WINDOW_YEARS), _shift_years(today, LONGEST_VALIDITY_YEARS)
    inside = [d for d in candidates if low <= d <= high]
    return min(inside, key=lambda d: abs((d - today).days)) if inside else None


def normalise_text(text: str) -> str:
    """NFKC (full-width digits and punctuation -> ASCII) with all whitespace removed.

    OCR inserts spaces inside numbers and dates ("2015. 03 .01"); no date format here needs them.
    """
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


# One printed date: YYYY, MM, DD with an optional single separator between the groups. Zero-padded month
# and day are required: PRC cards print them so, and without padding "2015.3.12035" would be ambiguous. A
# blurred dot may come back as the ideographic comma or full stop ("2044.08、13"; NFKC leaves both as they are).
_YMD = r"(\d{4})[.,、。\-/]?(\d{2})[.,、。\-/]?(\d{2})"
# Range separators: hyphen and dashes, tilde, 至, and 一 (the CJK "one" OCR often returns for a long dash).
# Optional, because OCR sometimes drops a thin dash entirely and the fixed-width dates still split cleanly.
_RANGE_SEP = r"([-—–~至一_]*)"
# Under motion blur the dash between two full dates may come back as a CJK character (`20250221年20350221`);
# such a character counts as the dash only there, between two full dates (a label such as 有效期限 ends in one).
_MISREAD_DASH = re.compile(rf"(?<!\d)({_YMD})[\u4e00-\u9fff](?=(?:{_YMD})(?!\d)|长期)")  # \1: the start date
# Digit boundaries: an 18-digit ID number contains two 8-digit runs that look like a range.
_VALIDITY = re.compile(rf"(?<!\d)(?:{_YMD})?{_RANGE_SEP}(?:{_YMD}(?!\d)|(长期))")
# Validity periods are 5, 10 or 20 years (居民身份证法 Art. 5); a wider span is a misread, not a card.
_MAX_VALIDITY_YEARS = 21
_PLAUSIBLE_YEARS = range(1984, 2100)  # second-generation cards were first issued in 1984


def parse_validity(text: str) -> tuple[date | None, date | Literal["long-term"]] | None:
    """A PRC ID 有效期限 range: `(start, end)`, end being a date or "long-term" (长期).

    Accepts `2015.03.01-2035.03.01`, `2015.03.01至2035.03.01`, `—`/`–`/`~` separators, `,`/`-`/no digit
    separators, OCR spacing, and a `长期` end. start is None when only the end is legible. Returns None when
    no end can be read, when a date does not exist, or when the end is not after the start (a misread).
    A lone date or a lone 长期 is not a range: without a start date, a separator must precede the end.
    """
    flat = _MISREAD_DASH.sub(r"\1-", normalise_text(text))
    for m in _VALIDITY.finditer(flat):
        start_parts, separator = m.group(1, 2, 3), m.group(4)
        end_parts, long_term = m.group(5, 6, 7), m.group(8)
        if start_parts[0] is None and not separator:
            continue
        start = make_date(*map(int, start_parts)) if start_parts[0] is not None else None
        if start_parts[0] is not None and (start is None or start.year not in _PLAUSIBLE_YEARS):
            return None
        if long_term is not None:
            return start, LONG_TERM
        end = make_date(*map(int, end_parts))
        if end is None or end.year not in _PLAUSIBLE_YEARS:
            return None
        if start is not None and not 0 < end.year - start.year <= _MAX_VALIDITY_YEARS:
            return None
        return start, end
    return None


_CJK_DATE = re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日?")


def parse_cjk_date(text: str) -> date | None:
    """A `1995 年 7 月 17 日` date (PRC ID 出生 line), tolerant of OCR spacing; None if absent/impossible."""
    m = _CJK_DATE.search(normalise_text(text))
    return make_date(*map(int, m.groups())) if m else None


# "DD. MM. YYYY." (a dot and a space, as Croatian documents print dates) separates like a dot alone
_DMY = re.compile(r"(?<!\d)(\d{2})(?:\. |[.\-/ ])(\d{2})(?:\. |[.\-/ ])?(\d{4})(?!\d)")
_YMD_ISO = re.compile(r"(?<!\d)(\d{4})[.\-/](\d{2})[.\-/](\d{2})(?!\d)")
_MONTHS = {m: i + 1 for i, m in enumerate(
    ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
# The month may carry one OCR digit for a letter (0CT, 5EP, FE8, N0V): at least two of its three are letters.
# A bilingual month ("MAA/MAR", "AVR/APR") is read by whichever of its two words is an English month.
_DAY_MON_YEAR = re.compile(r"(?<!\d)(\d{1,2})\s*([A-Z058]{3})[A-Z]*(?:\s*/\s*([A-Z]{3})[A-Z]*)?\s*(\d{4}|\d{2})(?!\d)",
                           re.IGNORECASE)
_MONTH_LETTERS = str.maketrans("058", "OSB")


def without_month_dates(text: str) -> str:
    """`text` with each day, month word and year (`22 MAR 2024`, `15 APR/AVR 12`, by the pattern and months
    `parse_printed_dates` reads them with) blanked out: the letters of a date are no name. A name word must not be
    confirmed by a date's month (a given name MARK cut to MAR beside "22 MAR 2024"), as a date in digits never is."""
    return _DAY_MON_YEAR.sub(lambda m: m.group() if _month_of(m) is None else " " * len(m.group()), text)


def _month_of(m: re.Match[str]) -> int | None:
    """The month of a `_DAY_MON_YEAR` match: its month word (one OCR digit for a letter allowed), else the English
    one of a bilingual pair; None when neither is a month."""
    token, other = m.group(2).upper(), (m.group(3) or "").upper()
    month = _MONTHS.get(token.translate(_MONTH_LETTERS)) if sum(c.isalpha() for c in token) >= 2 else None
    return month if month is not None or not other else _MONTHS.get(other)


def parse_printed_dates(text: str, *, today: date) -> list[date]:
    """Every date printed in a visual-zone line: `DD.MM.YYYY`, `DD. MM. YYYY.`, `DD-MM-YYYY`, `DD MM YYYY`,
    `YYYY-MM-DD`, `15 APR/AVR 12`, `20MAR2006`, `12 0CT 2031` (a digit read for a month's letter). Two-digit
    years use the expiry window (the visual zone is consulted for expiry). Impossible dates are dropped, not
    repaired.
    """
    upper = unicodedata.normalize("NFKC", text).upper()
    found: list[date] = []
    for m in _DMY.finditer(upper):
        d = make_date(int(m.group(3)), int(m.group(2)), int(m.group(1)))
        if d:
            found.append(d)
    for m in _YMD_ISO.finditer(upper):
        d = make_date(*map(int, m.groups()))
        if d:
            found.append(d)
    for m in _DAY_MON_YEAR.finditer(upper):
        month = _month_of(m)
        if month is None:
            continue
        year = m.group(4)
        if len(year) == 4:
            d = make_date(int(year), month, int(m.group(1)))
        else:
            d = yymmdd(f"{year}{month:02d}{int(m.group(1)):02d}", kind="expiry", today=today)
        if d:
            found.append(d)
    return found
