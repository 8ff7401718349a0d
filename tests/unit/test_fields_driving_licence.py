"""EU / ISO 18013 driving licence: the one-line zone (examples built here from the layout; the upstream
vectors are in tests/realdata/) and whole-page readings with the numbered printed fields."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.document import read_document
from pipeline.formats import driving_licence, mrz
from tests.unit.test_fields_document import page, states

TODAY = date(2026, 6, 1)

# Built here from the French layout; check digits computed by hand: "D1FRA19AB12345" -> 2 (the number check
# covers the prefix too), all 29 characters before the last -> 5.
BUILT = "D1FRA19AB123452340101DURAND<<5"
# Another issuer (the Dutch licence puts a BAP key after its number): only the frame is known; the final
# digit over the first 29 characters computed by hand -> 8.
OTHER_ISSUER = "D1NLD15094962111659VW87ZZ7XN78"


def test_built_example_and_each_check_digit() -> None:
    r = driving_licence.parse(BUILT, TODAY)
    assert r is not None and r.valid and r.doc_type == "driving_licence"
    assert (r.country, r.number, r.expiry_date, r.surname, r.name) == ("FRA", "19AB12345", date(2034, 1, 1),
                                                                       "DURAND", None)
    assert driving_licence.parse(BUILT[:14] + "3" + BUILT[15:], TODAY).checks_failed == ["mrz.number",
                                                                                         "mrz.composite"]
    assert driving_licence.parse(BUILT[:29] + "6", TODAY).checks_failed == ["mrz.composite"]
    assert mrz.parse([BUILT], TODAY) is None  # not an ICAO shape


def test_other_issuer_frame_only() -> None:
    r = driving_licence.parse(OTHER_ISSUER, TODAY)
    assert r is not None and r.valid and r.country == "NLD"
    assert (r.number, r.expiry_date, r.surname) == (None, None, None)  # issuer layout not guessed
    assert driving_licence.find([OTHER_ISSUER], TODAY) == r
    assert driving_licence.find([OTHER_ISSUER[:29] + "9"], TODAY) is None  # its only digit fails: not found


@pytest.mark.parametrize("lines", [
    [BUILT.replace("<", "K")],
    [BUILT.replace("<", "«")],
    ["PERMIS DE CONDUIRE", BUILT[:12], BUILT[12:]],
    [BUILT.replace("340101", "34OIOI")],
])
def test_find_repairs_ocr_noise(lines: list[str]) -> None:
    assert driving_licence.find(lines, TODAY) == driving_licence.parse(BUILT, TODAY)


def test_find_does_not_guess() -> None:
    # a misread number character fails both digits (the composite covers the number): nothing is found
    assert driving_licence.find([BUILT.replace("AB123", "A8123")], TODAY) is None
    assert driving_licence.find(["D1FRA", "PERMIS"], TODAY) is None


# ---------------------------------------------------------------------------------- whole page

FRONT = ["PERMIS DE CONDUIRE", "REPUBLIQUE FRANCAISE", "1. DURAND", "2. CLAIRE, MARIE", "3. 12.03.1985 LYON",
         "4a. 02.01.2019", "4b. 01.01.2034", "4c. PREFECTURE DU RHONE", "5. 19AB12345"]


def test_page_front_with_zone() -> None:
    r = read_document(page(*FRONT, BUILT), TODAY)
    assert r.doc_type == "driving_licence"
    assert r.fields == {"name": "DURAND CLAIRE MARIE", "id_number": "19AB12345", "expiry_date": "2034-01-01"}
    assert set(states(r).values()) == {"present"}
    assert {"mrz.number", "mrz.composite", "cross.name_mrz_vs_viz", "cross.number_mrz_vs_viz"} <= set(r.checks)
    assert r.check_failures == []


def test_page_surname_contradicting_zone_is_unreadable() -> None:
    lines = [x.replace("1. DURAND", "1. MARTIN") for x in FRONT]
    r = read_document(page(*lines, BUILT), TODAY)
    assert r.fields["name"] is None and states(r)["name"] == "unreadable"
    assert "cross.name_mrz_vs_viz" in r.check_failures
    assert r.fields["id_number"] == "19AB12345"


def test_page_other_issuer_reads_printed_fields_at_low_confidence() -> None:
    lines = [x.replace("19AB12345", "5094962111") for x in FRONT]
    r = read_document(page(*lines, OTHER_ISSUER), TODAY)
    assert r.doc_type == "driving_licence"
    assert r.fields["id_number"] == "5094962111" and r.fields["expiry_date"] == "2034-01-01"
    assert all(s.confidence <= 0.5 for k, s in r.states.items() if s.state == "present")


def test_page_printed_expiry_cross_checks_the_zone() -> None:
    r = read_document(page(*FRONT, BUILT), TODAY)
    assert "cross.expiry_mrz_vs_viz" in r.checks
    lines = [x.replace("4b. 01.01.2034", "4b. 01.01.2033") for x in FRONT]
    r = read_document(page(*lines, BUILT), TODAY)
    assert "cross.expiry_mrz_vs_viz" in r.check_failures and r.states["expiry_date"].confidence <= 0.5


def test_a_licences_expiry_has_a_class_of_its_own_not_the_french_cards_printed_validity() -> None:
    from pipeline.trust.table import evidence_class

    for zone in (BUILT, OTHER_ISSUER):
        lines = FRONT if zone is BUILT else [x.replace("19AB12345", "5094962111") for x in FRONT]
        r = read_document(page(*lines, zone), TODAY)
        classes = {f: evidence_class(f, r.doc_type, r.checks, r.check_failures) for f in r.fields}
        assert classes["expiry_date"] == "expiry_date/dl.expiry"
        assert classes["name"].startswith("name/mrz.")  # the zone's surname vouches for the name as before
