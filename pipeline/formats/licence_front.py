"""Fronts of photocard driving licences of the EU model (Directive 2006/126/EC, Annex I; the UK's keeps it) that
carry no machine-readable zone: their fields are numbered, not labelled (1. surname, 2. given names, 3. birth date
and place, 4a. issue date, 4b. expiry, 4c. authority, 5. licence number).

Recognised by a licence title in one of the model's languages and a field 1 or 2 read; the name is fields 1 and 2
together (half a name is no name; the title the UK prints before the given names is no part of it), the expiry
field 4b's first real date, the number field 5 (4d is an optional personal number). US licences (AAMVA) number
their fields the same way but for the number, which is 4d (their 5 is the document discriminator), print dates
month first, and may print a short label after the field number ("4d DLN", "1 LN"), which is no part of the
value.

The UK licence (title "DRIVING LICENCE" with "UNITED KINGDOM" or "UK") is the one issuer whose number is decoded.
Its 16 characters (DVLA) are the surname's first five letters (padded with 9), the birth date as decade digit,
month (plus 50 for a woman), day and year digit, the first two initials (9 for none), a digit and two check
characters; a 2-digit issue number printed after it is not part of it. So the number and fields 1-3 vouch for
each other: the number is stored only when its shape holds and it spells the printed surname's first letters,
the initials of the given names and, where field 3 was read, the birth date; then the reading carries
`national_front.ISSUER_FRONT_CHECK` (the issuer's layout recognised, its number consistent), whose class is
calibrated on generated fronts. A number that does not agree with the fields printed beside it is unreadable
(`dl.uk_number`): one of them was misread, and nothing says which. A look-alike in one of the number's places is
read as what that place holds (0 as O among the surname's letters, S as 5 among the birth date's digits): the
repaired number must still spell the printed fields. Other issuers' numbers are read as printed, and their fields
stay in the `printed` class, below the auto-accept threshold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Sequence

from pipeline.formats.dates import make_date, parse_printed_dates
from pipeline.formats.document_format import FormatDefaults
from pipeline.formats.lines import OcrLine, fold
from pipeline.formats.national_front import ISSUER_FRONT_CHECK, ISSUER_FRONT_EVIDENCE
from pipeline.formats.reading import HEURISTIC, Builder, DocumentType, Page
from pipeline.formats.values import clean_name, clean_number

# Titles of the model's front in its languages (folded: upper case, no accents)
TITLE = re.compile(r"\bDRIVING LICEN[CS]E\b|\bDRIVER S? ?LICEN[CS]E\b|\bPERMIS DE CONDUIRE\b|\bFUHRERSCHEIN\b|"
                   r"\bRIJBEWIJS\b|\bPATENTE DI GUIDA\b|\bPERMISO DE CONDUCCION\b|\bVOZACKA DOZVOLA\b|"
                   r"\bRIDICSKY PRUKAZ\b|\bPRAWO JAZDY\b|\bKORKORT\b|\bCARTA DE CONDUCAO\b")
US_TITLE = re.compile(r"\bDRIVER S? ?LICEN[CS]E\b|\bUSA\b")  # AAMVA cards: dates month first (MM/DD/YYYY)
_MDY = re.compile(r"(?<!\d)(\d{2})[/-](\d{2})[/-](\d{4})(?!\d)")
UK_TITLE = re.compile(r"\bUNITED KINGDOM\b|\bUK\b|\bGREAT BRITAIN\b|\bDVLA\b|\bDVA\b")
UK_NUMBER = re.compile(r"[A-Z9]{5}\d{6}[A-Z9]{2}\d[A-Z0-9]{2}")
# What each of the number's 16 places holds (letter or 9 padding; digit; either), and the look-alikes a recogniser
# reads there: a letter place takes 0 as O, 1 as I, 5 as S, 8 as B; a digit place the other way round. The
# repaired number must still spell the printed fields (`uk_number_agrees`), so a repair cannot invent one.
_UK_PLACES = "LLLLLDDDDDDLLDXX"
_AS_PLACE_HOLDS = {"L": str.maketrans("0158", "OISB"), "D": str.maketrans("OISB", "0158"), "X": {}}
_TITLES = {"MR", "MRS", "MISS", "MS", "DR", "MX", "SIR", "LADY", "REV"}
UK_NUMBER_CHECK = "dl.uk_number"  # failed: the number does not spell the printed surname, initials or birth date

# A field number at the start of a box ("1.", "4b.", "4 b", "5 "), then a dot or a space (so a date's "11.03" or
# an issue number's "35" is no field number), and the rest of the box
_FIELD = re.compile(r"^\s*(1|2|3|4\s*[abcd]|5|8|9)(?:\s*[.,:]\s*|\s+|$)(.*)$", re.IGNORECASE)
# Short labels US cards print after a field number ("1 LN", "4d DLN", "4b EXP"): not part of the value
_US_LABEL = re.compile(r"^(?:LN|FN|DLN|DL|LIC|EXP|NO)\b[.:#]?\s*", re.IGNORECASE)


@dataclass(slots=True)
class LicenceFront:
    """The numbered fields read, each (text, box score), and whether the issuer is the UK or a US state."""

    uk: bool
    fields: dict[str, tuple[str, float]] = field(default_factory=dict)
    us: bool = False

    def dates(self, text: str, today: date) -> list[date]:
        """The real dates in `text`, month first on a US card."""
        if not self.us:
            return parse_printed_dates(text, today=today)
        found = (make_date(int(y), int(m), int(d)) for m, d, y in _MDY.findall(text))
        return [d for d in found if d is not None]


def numbered_fields(lines: Sequence[OcrLine]) -> dict[str, tuple[str, float]]:
    """Field number -> (value, score): the value read in the field number's own box after it, else the nearest
    box to its right on its row; the first occurrence of each field wins (the card prints each once)."""
    found: dict[str, tuple[str, float]] = {}
    for line in lines:
        m = _FIELD.match(line.text)
        if m is None:
            continue
        key = re.sub(r"\s+", "", m.group(1)).lower()
        if key in found:
            continue
        value, score = _US_LABEL.sub("", m.group(2).strip()), line.score
        if not value:
            right = _box_right(line, lines)
            # a bare digit is a field number only when printed smaller than the value after it (else it is a
            # day, an issue number); with its dot or its letter ("4b") it is one anyway
            marked = bool(re.search(r"[.,:]\s*$", line.text)) or key[-1].isalpha()
            if right is None or not (marked or line.height < 0.85 * right.height):
                continue
            value, score = _US_LABEL.sub("", right.text.strip()), min(score, right.score)
        if value:
            found[key] = (value, score)
    return found


def _box_right(label: OcrLine, lines: Sequence[OcrLine]) -> OcrLine | None:
    """The nearest box on the field number's row to its right, within eight of its heights."""
    right = [x for x in lines if x is not label and abs(x.middle - label.middle) < 0.6 * label.height
             and x.left >= label.right - 0.5 * label.height and x.left - label.right < 8 * label.height]
    return min(right, key=lambda x: x.left) if right else None


def uk_number_read(text: str) -> str:
    """A UK number as printed, each place read as what it holds (`_UK_PLACES`): 'M0RGA' is MORGA, '7S3116' is
    753116; a 9 padding a short surname stays a 9."""
    if len(text) != len(_UK_PLACES):
        return text
    return "".join(c.translate(_AS_PLACE_HOLDS[kind]) for c, kind in zip(text, _UK_PLACES))


def given_names(value: str) -> str:
    """Field 2 without the title the UK licence prints before the given names ("MISS SARAH"): no name's part."""
    words = value.split()
    return " ".join(words[1:] if len(words) > 1 and fold(words[0]) in _TITLES else words)


def uk_number_agrees(number: str, surname: str, given: str, birth: date | None) -> bool:
    """Whether a UK licence number (16 characters) spells the surname's first five letters (9-padded; a MAC
    prefix as MC, as the DVLA writes it), the first two initials (9 for none) and, when known, the birth date
    (decade, month or month + 50, day, year)."""
    letters = re.sub(r"[^A-Z]", "", fold(surname))
    letters = "MC" + letters[3:] if letters.startswith("MAC") else letters
    initials = "".join(word[0] for word in fold(given).split())[:2]
    if number[:5] != letters[:5].ljust(5, "9") or number[11:13] != initials.ljust(2, "9"):
        return False
    if birth is None:
        return True
    month = int(number[6:8])
    return (number[5], number[10], number[8:10]) == (str(birth.year // 10 % 10), str(birth.year % 10),
                                                     f"{birth.day:02d}") and month % 50 == birth.month


class LicenceFrontFormat(FormatDefaults):
    name = "licence_front"
    doc_types = ("driving_licence",)
    may_carry_mrz = False  # the model's zone, where an issuer prints one, is on the back

    def find(self, page: Page) -> LicenceFront | None:
        words = fold(" ".join(page.texts))
        if not TITLE.search(words):
            return None
        fields = numbered_fields(page.lines)
        if not {"1", "2"} & fields.keys():
            return None
        return LicenceFront(uk=UK_TITLE.search(words) is not None, fields=fields,
                            us=US_TITLE.search(words) is not None)

    def read(self, found: LicenceFront, page: Page, b: Builder) -> DocumentType:
        fields = found.fields
        surname, given = fields.get("1"), fields.get("2")
        if surname is None or given is None:
            b.unreadable("name")
        else:
            name = clean_name(f"{surname[0]} {given_names(given[0])}")
            b.present("name", name, min(surname[1], given[1]) * HEURISTIC)
        expiry = fields.get("4b")
        dates = found.dates(expiry[0], page.today) if expiry is not None else []
        if expiry is not None and dates:
            b.present("expiry_date", dates[0].isoformat(), expiry[1] * HEURISTIC)
        else:
            b.unreadable("expiry_date")
        self._number(found, page, b)
        return "driving_licence"

    @staticmethod
    def _number(found: LicenceFront, page: Page, b: Builder) -> None:
        # the number is field 5 on the EU model (whose 4d is a personal number); US cards (AAMVA) print it as 4d
        # and use 5 for another number
        printed = found.fields.get("4d") if found.us else found.fields.get("5")
        if printed is None:
            return b.unreadable("id_number")
        joined = clean_number(printed[0].upper())
        if not found.uk:
            return b.present("id_number", joined, printed[1] * HEURISTIC)
        number, issue = uk_number_read(joined[:16]), joined[16:]  # the issue number after it is no part of it
        if not UK_NUMBER.fullmatch(number) or not re.fullmatch(r"(\d\d)?", issue):
            b.failures.append("number.shape")
            return b.unreadable("id_number")
        surname, given = found.fields.get("1"), found.fields.get("2")
        birth_field = found.fields.get("3")
        births = parse_printed_dates(birth_field[0], today=page.today) if birth_field else []
        if surname is None or given is None or not uk_number_agrees(number, surname[0], given_names(given[0]),
                                                                     births[0] if births else None):
            b.failures.append(UK_NUMBER_CHECK)
            return b.unreadable("id_number")
        b.issuer = "GBR"
        b.checks.append(ISSUER_FRONT_CHECK)
        b.present("id_number", number, printed[1] * HEURISTIC)

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        return ISSUER_FRONT_EVIDENCE if ISSUER_FRONT_CHECK in checks else None


FORMAT = LicenceFrontFormat()
