"""PRC Foreign Permanent Resident ID Card (外国人永久居留身份证): the card numbers of the 2017 and 2023
models, and reading a card from OCR lines.

Numbers (National Immigration Administration, 2023 machine-readable rules for the new card):
- 2017 model, 15 characters: nationality (3 letters, ISO 3166-1 alpha-3), accepting authority (4 digits:
  province + city), birth date YYMMDD, one sequence digit, and a check digit computed like an ICAO 9303
  check digit (7-3-1 weights, A-Z = 10..35) over the first 14 characters.
- 2023 model, 18 characters, shaped like the resident ID number: '9' (foreigner), province of acceptance
  (2 digits), nationality (3 digits, ISO 3166-1 numeric), birth date YYYYMMDD, sequence (3 digits) and an
  ISO 7064 MOD 11-2 check character, computed as for the 公民身份号码.
Both embed the birth date, so a number is valid only if that date exists and is not in the future.

As a registered format (`FORMAT`): the PRC Foreign Permanent Resident ID Card (外国人永久居留身份证, 2017 and 2023 models):
recognised by its title, read by label; the card number carries its own check character (`cn_permanent_residence`).

Registered before the resident ID card: its title also says 中华人民共和国.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, Sequence

from pipeline.formats.dates import make_date, normalise_text, parse_printed_dates, parse_validity, yymmdd
from pipeline.formats.document_format import FormatDefaults, NumberCheck
from pipeline.formats.lines import line_score
from pipeline.formats.reading import CROSS_DISAGREES, UNCHECKED_NAME, Builder, DocumentType, Page
from pipeline.formats import cn_id, mrz

_NUMBER_2017 = re.compile(r"[A-Z]{3}\d{12}")
_NUMBER_2023 = re.compile(r"9\d{16}[0-9X]")


def birth_date(number: str, *, today: date) -> date | None:
    """The birth date embedded in a 15- or 18-character number (None if it is not a real past date)."""
    if _NUMBER_2017.fullmatch(number):
        return yymmdd(number[7:13], kind="birth", today=today)
    if _NUMBER_2023.fullmatch(number):
        born = make_date(int(number[6:10]), int(number[10:12]), int(number[12:14]))
        return born if born is not None and born <= today else None
    return None


def is_valid_number(s: str, *, today: date | None = None) -> bool:
    """A 2017 (15-character) or 2023 (18-character) card number with a known province, a real birth date
    not after `today` (default: the current date) and a correct check character."""
    number, today = s.upper(), today or date.today()
    if birth_date(number, today=today) is None:
        return False
    if len(number) == 15:
        return int(number[3:5]) in cn_id.PROVINCES and mrz.check_digit(number[:14]) == int(number[14])
    return int(number[1:3]) in cn_id.PROVINCES and cn_id.check_char(number[:17]) == number[17]


_TO_DIGIT = str.maketrans({"O": "0", "D": "0", "Q": "0", "I": "1", "L": "1", "|": "1", "B": "8", "S": "5",
                           "Z": "2", "G": "6", "×": "X"})
_TO_ALPHA = str.maketrans("012568", "OIZSGB")
_CANDIDATE_15 = re.compile(r"[A-Z0-9]{3}[0-9ODQILBSZG|]{12}")
_CANDIDATE_18 = re.compile(r"9[0-9ODQILBSZG|]{16}[0-9X×]")


def normalise_number(text: str, *, today: date | None = None) -> str | None:
    """The valid card number in an OCR string, repairing letter/digit confusions by position (letters in
    the nationality code, digits elsewhere) and spacing; None unless a repaired candidate passes
    `is_valid_number` (its check character makes a wrong repair unlikely)."""
    flat = re.sub(r"\s+", "", unicodedata.normalize("NFKC", text).upper())
    for width, pattern in ((18, _CANDIDATE_18), (15, _CANDIDATE_15)):
        for start in range(len(flat) - width + 1):
            window = flat[start:start + width]
            if not pattern.fullmatch(window):
                continue
            candidate = window.translate(_TO_DIGIT) if width == 18 else \
                window[:3].translate(_TO_ALPHA) + window[3:].translate(_TO_DIGIT)
            if is_valid_number(candidate, today=today):
                return candidate
    return None


# ------------------------------------------------------------------------------------------- card

_MARKERS = ("永久居留", "PERMANENT RESIDENT")
_NAME_LABEL = re.compile(r"^(?:姓名)?\s*/?\s*NAME\s*[:：]?\s*", re.IGNORECASE)


@dataclass(slots=True)
class PermanentResidenceCard:
    """A card as read; `name` is the Latin name as printed with commas dropped ("ZHANG, SAN" -> "ZHANG SAN")."""

    number: str | None = None
    name: str | None = None
    valid_until: date | Literal["long-term"] | None = None
    checks: list[str] = field(default_factory=list)
    check_failures: list[str] = field(default_factory=list)


def is_card(texts: Sequence[str]) -> bool:
    """The card's title (中华人民共和国外国人永久居留身份证 / Foreign Permanent Resident ID Card) is on the page."""
    flat = unicodedata.normalize("NFKC", " ".join(texts)).upper()
    return any(m in flat or m in normalise_text(flat) for m in _MARKERS)


def _latin_name(texts: Sequence[str]) -> str | None:
    """The value after a 姓名/Name label: glued to it, or on the next line when the label stands alone."""
    for i, text in enumerate(texts):
        m = _NAME_LABEL.match(unicodedata.normalize("NFKC", text).strip())
        if m is None or "NAME" not in text.upper():
            continue
        value = text.strip()[m.end():].strip() or (texts[i + 1].strip() if i + 1 < len(texts) else "")
        value = " ".join(value.replace(",", " ").split())
        return value if re.fullmatch(r"[A-Z][A-Z '\-]*", value) else None
    return None


def read_card(texts: Sequence[str], *, today: date) -> PermanentResidenceCard:
    """Number (checksum-valid only), printed name and the 有效期限 end date from OCR lines in reading
    order; the printed birth date, when legible, is cross-checked against the number's."""
    card = PermanentResidenceCard(name=_latin_name(texts))
    for i, text in enumerate(texts):
        if card.number is None:
            card.number = normalise_number(text, today=today)
        if card.valid_until is None:
            window = text + (texts[i + 1] if i + 1 < len(texts) else "")
            validity = parse_validity(text) or (parse_validity(window) if "有效期限" in text else None)
            if validity is not None:
                card.valid_until = validity[1]
    if card.number is not None:
        card.checks.append("cn_pr.checksum")
        embedded = birth_date(card.number, today=today)
        printed = {d for t in texts if "出生" in t or "BIRTH" in t.upper()
                   for d in parse_printed_dates(t, today=today)}
        if printed:
            (card.checks if embedded in printed else card.check_failures).append("cn_pr.birth_matches_printed")
    if card.valid_until is not None:
        card.checks.append("cn_pr.validity_range")
    return card


CHECK = NumberCheck("cn_pr.checksum", is_valid_number,
                    "check character or embedded birth date is wrong")
# An 18-character number of the resident-ID shape carries its check character whatever document it is claimed to
# be on: a 居民身份证 number or a 2023 permanent resident card number (both MOD 11-2).
STRAY_CHECK = NumberCheck(
    "prc_number.checksum", lambda n: cn_id.is_valid_number(n) or is_valid_number(n),
    "an 18-character PRC-style number whose MOD 11-2 check character or birth date is wrong",
    shape=re.compile(r"\d{17}[\dX]"))


class PermanentResidenceFormat(FormatDefaults):
    name = "cn_permanent_residence"
    doc_types = ("cn_permanent_residence",)
    issuer = "CHN"  # 外国人永久居留身份证: issued by the PRC (the holder's nationality is another field)
    number_shape = re.compile(r"[A-Z]{3}\d{12}|9\d{16}[\dX]")  # the 2017 and the 2023 model
    number_checks = {"cn_permanent_residence": CHECK}
    stray_number_checks = (STRAY_CHECK,)
    disagreements = {"cn_pr.birth_matches_printed": "id_number"}  # the printed birth date and the number's

    def find(self, page: Page) -> Page | None:
        return page if is_card(page.texts) else None

    def read(self, found: Page, page: Page, b: Builder) -> DocumentType:
        """Checksum-valid number, labelled name, validity end."""
        lines = page.lines
        card = read_card(page.texts, today=page.today)
        b.checks += card.checks
        b.failures += card.check_failures
        if card.number is not None:
            penalty = CROSS_DISAGREES if card.check_failures else 1.0
            b.present("id_number", card.number, line_score(lines, card.number) * penalty)
        if card.name is not None:
            b.present("name", card.name, line_score(lines, card.name.split()[0]) * UNCHECKED_NAME)
        if card.valid_until is not None:
            until = card.valid_until if isinstance(card.valid_until, str) else card.valid_until.isoformat()
            b.present("expiry_date", until, line_score(lines, until.replace("-", ".")))
        return "cn_permanent_residence"


FORMAT = PermanentResidenceFormat()
