"""EU / ISO 18013 driving licences: the one-line 30-character machine-readable zone and the numbered
fields of the printed card (Directive 2006/126/EC, Annex I).

The zone (ISO/IEC 18013): 'D' (driving licence), a configuration digit ('1'), the issuing state (3
letters), issuer-defined data, and a 7-3-1 check digit over the first 29 characters. Only the French
layout of the issuer data is decoded here:
    D1FRA NUMBER(9) CHECK EXPIRY-YYMMDD SURNAME(8) COMPOSITE-CHECK
whose number check digit covers positions 0-13 ("D1FRA" included). Other issuers (e.g. the Dutch
licence, which puts a BAP key there) are recognised as driving licences by the prefix and the final check
digit, but their number is read from the printed field 5 only: no issuer layout is guessed.

The zone's surname is cut to 8 characters and has no given names, so the record's name always comes from
printed fields 1 (surname) and 2 (given names), cross-checked against the zone's surname.

As a registered format (`FORMAT`): the one-line zone and the card's numbered printed fields.

The zone holds the surname's first 8 letters and no given names, so the name always comes from printed
fields 1 and 2, checked against that prefix. The expiry has no check digit of its own (only the composite
protects it), so a printed expiry 4b must agree with it. For issuers whose zone layout is not decoded, the
number (field 5) and the expiry (4b) are read from the print at heuristic confidence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Collection, Literal, Sequence

from pipeline.formats.dates import parse_printed_dates, yymmdd
from pipeline.formats.national_mrz import Check, Layout
from pipeline.formats.reading import HEURISTIC, Builder, Page
from pipeline.formats import national_mrz
from pipeline.formats.values import clean_name, clean_number
from pipeline.formats.zone import ZoneFields, ZoneFormat, zone_evidence

FRENCH = Layout(
    prefix="D1FRA",
    width=30,
    classes=("adaaa" + "x" * 9 + "n" + "dddddd" + "N" * 8 + "n",),
    checks=(Check("mrz.number", ((0, 0, 14),), (0, 14)), Check("mrz.composite", ((0, 0, 29),), (0, 29))),
    name_spans=((0, 21, 29),),
    loses_tail=(False,),
    min_checks=2,
)
# Any issuer: only the frame is known. Two passing digits are impossible with one, so the prefix, exact
# width and the final digit are the evidence; the result carries no field values.
GENERIC = Layout(
    prefix="D1",
    width=30,
    classes=("adaaa" + "o" * 24 + "n",),
    checks=(Check("mrz.composite", ((0, 0, 29),), (0, 29)),),
    name_spans=(),
    loses_tail=(False,),
    min_checks=1,
)


@dataclass(slots=True)
class LicenceZone:
    """A decoded licence zone. `number`, `expiry_date` and `surname` are None for issuers whose layout is
    not decoded; `surname` is at most 8 characters (truncated by the format)."""

    country: str
    number: str | None
    expiry_date: date | None
    surname: str | None
    checks_passed: list[str] = field(default_factory=list)
    checks_failed: list[str] = field(default_factory=list)
    # the surname ends in a filler run before its 8 places do (a lone '<' may separate two parts of a cut
    # surname): it is the whole surname, not its first letters
    surname_closed: bool = False

    doc_type: Literal["driving_licence"] = "driving_licence"
    name: None = None  # the zone has no full name (see module docstring)

    @property
    def valid(self) -> bool:
        return bool(self.checks_passed) and not self.checks_failed


def _decode(line: str, passed: list[str], failed: list[str], today: date) -> LicenceZone:
    if line.startswith(FRENCH.prefix):
        return LicenceZone(country="FRA", number=line[5:14].replace("<", "") or None,
                           expiry_date=yymmdd(line[15:21], kind="expiry", today=today),
                           surname=national_mrz.names(line[21:29]) or None, checks_passed=passed, checks_failed=failed,
                           surname_closed=line[21:29].strip("<") != "" and line[21:29].endswith("<<"))
    return LicenceZone(country=line[2:5], number=None, expiry_date=None, surname=None,
                       checks_passed=passed, checks_failed=failed)


def _layout(line: str) -> Layout:
    return FRENCH if line.startswith(FRENCH.prefix) else GENERIC


def parse(line: str, today: date) -> LicenceZone | None:
    """Decode one exact zone line as printed (no repair); None when it is not a 30-character 'D1' zone
    with a 3-letter issuing state."""
    layout = _layout(line.strip())
    exact = national_mrz.exact(layout, [line])
    if exact is None or not exact[0][2:5].isalpha():
        return None
    return _decode(exact[0], *national_mrz.run_checks(layout, exact), today)


def find(lines: Sequence[str], today: date) -> LicenceZone | None:
    """Locate and decode a licence zone among OCR text lines: the French layout first (two check digits),
    else any issuer whose final check digit passes."""
    for layout in (FRENCH, GENERIC):
        found = national_mrz.find(layout, lines)
        if found is not None and found[0][0][2:5].isalpha():
            return _decode(found[0][0], found[1], found[2], today)
    return None


# ------------------------------------------------------------------------------------ printed card

_FIELD = re.compile(r"^\s*(1|2|4\s*b|5)\s*[.,:]\s*(\S.*)$", re.IGNORECASE)


def _name_words(value: str) -> str:
    """Given names are printed comma-separated on some licences ("CLAIRE, MARIE"): words only, without the
    quotation marks some licences print round the surname (`values.clean_name`)."""
    return clean_name(value.replace(",", " "))


@dataclass(slots=True)
class PrintedLicence:
    """Numbered fields as printed, each (value, index of the OCR line it came from)."""

    surname: tuple[str, int] | None = None
    given_names: tuple[str, int] | None = None
    expiry: tuple[date, int] | None = None
    number: tuple[str, int] | None = None


def read_printed(texts: Sequence[str], today: date) -> PrintedLicence:
    """Fields 1 (surname), 2 (given names), 4b (expiry) and 5 (licence number) from OCR lines in reading
    order; the first occurrence of each wins (the card prints each once)."""
    printed = PrintedLicence()
    for i, text in enumerate(texts):
        m = _FIELD.match(text)
        if m is None:
            continue
        key, value = re.sub(r"\s+", "", m.group(1)).lower(), m.group(2).strip()
        if key == "1" and printed.surname is None:
            printed.surname = (_name_words(value), i)
        elif key == "2" and printed.given_names is None:
            printed.given_names = (_name_words(value), i)
        elif key == "4b" and printed.expiry is None and (dates := parse_printed_dates(value, today=today)):
            printed.expiry = (dates[0], i)
        elif key == "5" and printed.number is None:
            printed.number = (clean_number(value.upper()), i)
    return printed


class DrivingLicenceFormat(ZoneFormat):
    name = "driving_licence"
    doc_types = ("driving_licence",)
    expiry_cross_checked = True

    def find_zone(self, rows: list[str], today: date, printed: Collection[str] = ()) -> ZoneFields | None:
        zone = find(rows, today)
        if zone is None:
            return None
        return ZoneFields(doc_type=zone.doc_type, name=zone.name, number=zone.number, expiry_date=zone.expiry_date,
                          birth_date=None, checks_passed=zone.checks_passed, checks_failed=zone.checks_failed,
                          surname_prefix=zone.surname, name_closed=zone.surname_closed, issuer=zone.country)

    def add_printed(self, page: Page) -> None:
        """A licence's printed fields are numbered (1. surname, 2. given names, 4b. expiry, 5. number), not
        labelled: add them to the printed values where no label gave one."""
        numbered = read_printed(page.texts, page.today)
        values, lines = page.printed.values, page.lines
        for kind, found in (("surname", numbered.surname), ("given", numbered.given_names),
                            ("number", numbered.number)):
            if found is not None:
                values.setdefault(kind, (found[0], lines[found[1]].score))
        if numbered.expiry is not None:
            values.setdefault("expiry", (numbered.expiry[0].strftime("%d.%m.%Y"), lines[numbered.expiry[1]].score))

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        """A licence's expiry has no check digit of its own (the French zone's composite covers it; other issuers
        print it as 4b only): class `dl.expiry`, apart from the French identity card's printed validity
        (`mrz.expiry_none`), which was measured on that card's back and says nothing of a licence's. The name
        and number keep the zone's classes."""
        source = zone_evidence(field, checks, failures)
        return "dl.expiry" if source is not None and field == "expiry_date" else source

    def number_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        viz_number = page.printed.values.get("number")
        if viz_number is not None:  # issuer layout not decoded
            b.present("id_number", re.sub(r"\s+", "", viz_number[0].upper()), viz_number[1] * HEURISTIC)

    def expiry_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        viz_expiry = page.printed.values.get("expiry")
        if viz_expiry is not None:
            dates = parse_printed_dates(viz_expiry[0], today=page.today)
            if dates:
                b.present("expiry_date", dates[0].isoformat(), viz_expiry[1] * HEURISTIC)


FORMAT = DrivingLicenceFormat()
