"""ICAO 9303 machine-readable zones: TD3 passports, TD1/TD2 identity cards, MRV-A/MRV-B visas.

The zone gives every field, each date and the number with a check digit of its own; the printed zone only
cross-checks them. A visa prints several document numbers (the visa's and the passport's), so a differing
labelled number there is no evidence against the zone's.
"""

from __future__ import annotations

from datetime import date
from typing import Collection

from pipeline.formats import mrz
from pipeline.formats.zone import ZoneFields, ZoneFormat

_VISAS = ("MRVA", "MRVB")


class IcaoFormat(ZoneFormat):
    name = "icao_mrz"
    doc_types = ("passport", "id_card", "visa")
    settled_by_zone = True
    expiry_check = "mrz.expiry"
    refuting_checks = {"mrz.number": "id_number", "mrz.expiry": "expiry_date"}

    def find_zone(self, rows: list[str], today: date, printed: Collection[str] = ()) -> ZoneFields | None:
        zone = mrz.find(rows, today, printed)
        if zone is None:
            return None
        return ZoneFields(doc_type=zone.doc_type, name=zone.name, number=zone.number, expiry_date=zone.expiry_date,
                          birth_date=zone.birth_date, checks_passed=zone.checks_passed,
                          checks_failed=zone.checks_failed, name_debris=zone.name_debris,
                          number_repaired=zone.number_repaired, prints_other_numbers=zone.format in _VISAS,
                          name_closed=zone.name_closed, issuer=zone.country)


FORMAT = IcaoFormat()
