"""French national identity card, 1988-2021 model (carte nationale d'identité, "CNI"): its 2x36
machine-readable zone, which is not ICAO TD2, and the validity date printed on the back.

Layout (line 1 | line 2), positions 0-based:
    ID FRA SURNAME(25) ADMIN-CODE(6)  |  ISSUE-YYMM(4) OFFICE(3) SEQUENCE(5) CHECK GIVEN-NAMES(14)
                                         BIRTH-YYMMDD CHECK SEX COMPOSITE-CHECK
The card number is line 2 [0:12] (printed as such on the front, "N°: 940992310285"); its check digit
covers those 12 characters, the birth check the birth date, the composite check all of line 1 and line 2
up to the composite digit. All use the ICAO 7-3-1 check digit.

The zone carries no expiry date: the card prints "Carte valable jusqu'au : DD.MM.YYYY" on the back. The
validity is not computed from the issue month (10 years, extended to 15 for some cards by a 2014 decree
without any change to the card): a value the card does not show is never stored.

As a registered format (`FORMAT`): the 1988-2021 French national identity card: its own 2x36 zone (not ICAO TD2),
read as an `id_card`.

The zone carries no expiry date: the back's "valable jusqu'au" date is read instead, else the expiry is
absent (front only) or unreadable (back shown, date not legible). Never derived from the issue month. No check
digit covers it; what vouches for it is `PRINTED_VALIDITY_SPAN_CHECK`: it is the back's "délivrée le" date plus
ten years (the day before), and the card number, whose check digit passed, begins with that issue's YYMM. A
misread digit in either date or the number breaks that, as the PRC card's statutory span does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Collection, Literal, Sequence

from pipeline.formats.dates import make_date, parse_printed_dates, yymmdd
from pipeline.formats.mrz import FRENCH_ID_PREFIX
from pipeline.formats.national_mrz import Check, Layout
from pipeline.formats.reading import Builder, Page
from pipeline.formats import national_mrz
from pipeline.formats.zone import PRINTED_VALIDITY_SPAN_CHECK, ZoneFields, ZoneFormat

LAYOUT = Layout(
    prefix=FRENCH_ID_PREFIX,
    width=36,
    classes=("aaaaa" + "N" * 25 + "o" * 6,
             "dddd" + "ooo" + "ddddd" + "n" + "N" * 14 + "dddddd" + "n" + "s" + "n"),
    checks=(Check("mrz.number", ((1, 0, 12),), (1, 12)),
            Check("mrz.birth", ((1, 27, 33),), (1, 33)),
            Check("mrz.composite", ((0, 0, 36), (1, 0, 35)), (1, 35))),
    name_spans=((0, 5, 30), (1, 13, 27)),
    loses_tail=(True, False),
    min_checks=2,
)


@dataclass(slots=True)
class FrenchIdResult:
    """A decoded CNI zone; `name` is "SURNAME GIVEN NAMES" single-spaced (None when both fields are empty)."""

    surname: str
    given_names: str
    number: str
    issued: str  # YYMM as printed
    birth_date: date | None
    sex: str | None
    checks_passed: list[str] = field(default_factory=list)
    checks_failed: list[str] = field(default_factory=list)

    doc_type: Literal["id_card"] = "id_card"
    expiry_date: None = None  # not in this zone (printed on the back)

    @property
    def name(self) -> str | None:
        return " ".join(p for p in (self.surname, self.given_names) if p) or None

    @property
    def valid(self) -> bool:
        return bool(self.checks_passed) and not self.checks_failed


def _decode(lines: Sequence[str], passed: list[str], failed: list[str], today: date) -> FrenchIdResult:
    l1, l2 = lines
    return FrenchIdResult(
        surname=national_mrz.names(l1[5:30]), given_names=national_mrz.names(l2[13:27]), number=l2[0:12],
        issued=l2[0:4], birth_date=yymmdd(l2[27:33], kind="birth", today=today),
        sex=l2[34] if l2[34] in "MF" else None, checks_passed=passed, checks_failed=failed)


def parse(lines: Sequence[str], today: date) -> FrenchIdResult | None:
    """Decode exact zone lines as printed (no repair); None when they are not a 2x36 'IDFRA' zone."""
    exact = national_mrz.exact(LAYOUT, lines)
    if exact is None:
        return None
    return _decode(exact, *national_mrz.run_checks(LAYOUT, exact), today)


def find(lines: Sequence[str], today: date) -> FrenchIdResult | None:
    """Locate and decode the zone among OCR text lines (fillers read as K, O/0 swaps, split lines)."""
    found = national_mrz.find(LAYOUT, lines)
    return _decode(found[0], found[1], found[2], today) if found else None


_EXPIRY_LABEL = re.compile(r"valable\s*jusqu", re.IGNORECASE)
_ISSUE_LABEL = re.compile(r"d[ée]livr[ée]e?\s*le", re.IGNORECASE)
VALIDITY_YEARS = 10  # as printed: a card issued on D is valid until the day before D ten years later
_BACK_MARKERS = re.compile(r"valable|d[ée]livr[ée]e|adresse|pr[ée]fecture", re.IGNORECASE)


def printed_expiry(texts: Sequence[str], today: date) -> tuple[int, date] | None:
    """The "Carte valable jusqu'au" date from the back as (index of the line it was read from, date); None
    when no such label with a real date is on the page. The date is read after the label, or from the
    next line only when the label stands alone (the next line is otherwise the issue date)."""
    return _labelled_date(_EXPIRY_LABEL, texts, today)


def printed_issue(texts: Sequence[str], today: date) -> date | None:
    """The "délivrée le" date from the back, read as `printed_expiry` reads its date; None when not legible."""
    found = _labelled_date(_ISSUE_LABEL, texts, today)
    return found[1] if found else None


def spans_validity(number: str, issued: date, expiry: date) -> bool:
    """Whether a printed expiry is the printed issue date plus the card's validity (`VALIDITY_YEARS`, ending the
    day before) and the card number begins with that issue's year and month (YYMM), as every card's does."""
    end = make_date(issued.year + VALIDITY_YEARS, issued.month, issued.day) or \
        date(issued.year + VALIDITY_YEARS, 3, 1)  # issued on 29 February: valid until 28 February
    return number[:4] == f"{issued:%y%m}" and expiry == end - timedelta(days=1)


def _labelled_date(label: re.Pattern[str], texts: Sequence[str], today: date) -> tuple[int, date] | None:
    for i, text in enumerate(texts):
        m = label.search(text)
        if m is None:
            continue
        after = text[m.end():]
        if any(c.isdigit() for c in after):
            found = parse_printed_dates(after, today=today)
            return (i, found[0]) if found else None
        found = parse_printed_dates(texts[i + 1], today=today) if i + 1 < len(texts) else []
        return (i + 1, found[0]) if found else None
    return None


def shows_back(texts: Sequence[str]) -> bool:
    """Whether the back of the card (address, issue and validity lines) is on the page."""
    return any(_BACK_MARKERS.search(t) for t in texts)


class FrenchIdFormat(ZoneFormat):
    name = "french_id_1988"
    doc_types = ("id_card",)
    number_shape = re.compile(r"\d{4}[0-9A-Z]{3}\d{5}")  # issue YYMM, office, sequence

    def find_zone(self, rows: list[str], today: date, printed: Collection[str] = ()) -> ZoneFields | None:
        zone = find(rows, today)
        if zone is None:
            return None
        return ZoneFields(doc_type=zone.doc_type, name=zone.name, number=zone.number, expiry_date=zone.expiry_date,
                          birth_date=zone.birth_date, checks_passed=zone.checks_passed,
                          checks_failed=zone.checks_failed, issuer="FRA")

    def expiry_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        found = printed_expiry(page.texts, page.today)
        if found is not None:
            b.present("expiry_date", found[1].isoformat(), page.lines[found[0]].score)
            issued = printed_issue(page.texts, page.today)
            if issued is not None and "mrz.number" in b.checks and spans_validity(zone.number or "", issued,
                                                                                      found[1]):
                b.checks.append(PRINTED_VALIDITY_SPAN_CHECK)
        elif shows_back(page.texts):
            b.unreadable("expiry_date")
        else:
            b.absent("expiry_date")


FORMAT = FrenchIdFormat()
