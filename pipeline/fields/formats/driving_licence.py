"""EU / ISO 18013 driving licences: the one-line zone and the card's numbered printed fields.

The zone holds the surname's first 8 letters and no given names, so the name always comes from printed
fields 1 and 2, checked against that prefix. The expiry has no check digit of its own (only the composite
protects it), so a printed expiry 4b must agree with it. For issuers whose zone layout is not decoded, the
number (field 5) and the expiry (4b) are read from the print at heuristic confidence.
"""

from __future__ import annotations

import re
from datetime import date

from pipeline.fields import driving_licence
from pipeline.fields.dates import parse_printed_dates
from pipeline.fields.formats.zone import ZoneFields, ZoneFormat
from pipeline.fields.page import HEURISTIC, Builder, Page


class DrivingLicenceFormat(ZoneFormat):
    name = "driving_licence"
    doc_types = ("driving_licence",)
    expiry_cross_checked = True

    def find_zone(self, rows: list[str], today: date) -> ZoneFields | None:
        zone = driving_licence.find(rows, today)
        if zone is None:
            return None
        return ZoneFields(doc_type=zone.doc_type, name=zone.name, number=zone.number, expiry_date=zone.expiry_date,
                          birth_date=None, checks_passed=zone.checks_passed, checks_failed=zone.checks_failed,
                          surname_prefix=zone.surname, name_closed=zone.surname_closed, issuer=zone.country)

    def add_printed(self, page: Page) -> None:
        """A licence's printed fields are numbered (1. surname, 2. given names, 4b. expiry, 5. number), not
        labelled: add them to the printed values where no label gave one."""
        numbered = driving_licence.read_printed(page.texts, page.today)
        values, lines = page.printed.values, page.lines
        for kind, found in (("surname", numbered.surname), ("given", numbered.given_names),
                            ("number", numbered.number)):
            if found is not None:
                values.setdefault(kind, (found[0], lines[found[1]].score))
        if numbered.expiry is not None:
            values.setdefault("expiry", (numbered.expiry[0].strftime("%d.%m.%Y"), lines[numbered.expiry[1]].score))

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
