"""The 1988-2021 French national identity card: its own 2x36 zone (not ICAO TD2), read as an `id_card`.

The zone carries no expiry date: the back's "valable jusqu'au" date is read instead, else the expiry is
absent (front only) or unreadable (back shown, date not legible). Never derived from the issue month.
"""

from __future__ import annotations

import re
from datetime import date

from pipeline.fields import french_id
from pipeline.fields.formats.zone import ZoneFields, ZoneFormat
from pipeline.fields.page import Builder, Page


class FrenchIdFormat(ZoneFormat):
    name = "french_id_1988"
    doc_types = ("id_card",)
    number_shape = re.compile(r"\d{4}[0-9A-Z]{3}\d{5}")  # issue YYMM, office, sequence

    def find_zone(self, rows: list[str], today: date) -> ZoneFields | None:
        zone = french_id.find(rows, today)
        if zone is None:
            return None
        return ZoneFields(doc_type=zone.doc_type, name=zone.name, number=zone.number, expiry_date=zone.expiry_date,
                          birth_date=zone.birth_date, checks_passed=zone.checks_passed,
                          checks_failed=zone.checks_failed, issuer="FRA")

    def expiry_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        found = french_id.printed_expiry(page.texts, page.today)
        if found is not None:
            b.present("expiry_date", found[1].isoformat(), page.lines[found[0]].score)
        elif french_id.shows_back(page.texts):
            b.unreadable("expiry_date")
        else:
            b.absent("expiry_date")


FORMAT = FrenchIdFormat()
