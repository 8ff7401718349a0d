"""French national ID card 1988-2021 (2x36 zone, not ICAO TD2): an example built here from the layout,
OCR damage, and whole-page readings (upstream vectors and real specimens: tests/realdata/)."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.document import read_document
from pipeline.formats import french_id, mrz
from tests.unit.test_fields_document import page, states

TODAY = date(2026, 6, 1)

# Built here from the layout (surname with two words, two given names, no administrative code, a
# 29 February birth date); check digits computed by hand: number 051275101234 -> 1, birth 800229 -> 5,
# composite (line 1 + line 2 up to it) -> 7.
BUILT = ["IDFRADUPONT<LAMBERT<<<<<<<<<<<<<<<<<", "0512751012341MARIE<<ANNE<<<8002295F7"]


def test_built_example_and_each_check_digit() -> None:
    r = french_id.parse(BUILT, TODAY)
    assert r is not None and r.valid
    assert (r.name, r.number, r.birth_date, r.sex) == ("DUPONT LAMBERT MARIE ANNE", "051275101234",
                                                       date(1980, 2, 29), "F")
    assert r.checks_passed == ["mrz.number", "mrz.birth", "mrz.composite"]
    for position, check in ((12, "mrz.number"), (33, "mrz.birth"), (35, "mrz.composite")):
        line2 = BUILT[1][:position] + str((int(BUILT[1][position]) + 1) % 10) + BUILT[1][position + 1:]
        broken = french_id.parse([BUILT[0], line2], TODAY)
        assert check in broken.checks_failed and not broken.valid


def test_not_icao_td2_and_not_other_shapes() -> None:
    assert mrz.parse(BUILT, TODAY) is None and mrz.find(BUILT, TODAY) is None
    assert french_id.parse(["I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "D231458907UTO7408122F1204159<<<<<<<6"],
                           TODAY) is None
    assert french_id.parse([BUILT[0], BUILT[1][:-1]], TODAY) is None
    assert french_id.parse([BUILT[0].lower(), BUILT[1]], TODAY) is None


@pytest.mark.parametrize("lines", [
    [BUILT[0].replace("<", "K"), BUILT[1].replace("<", "K")],           # fillers read as K
    [BUILT[0].replace("<", "«"), BUILT[1]],                              # fillers read as «
    [BUILT[0].rstrip("<"), BUILT[1]],                                    # trailing fillers dropped
    ["REPUBLIQUE FRANCAISE", BUILT[0][:18], BUILT[0][18:], BUILT[1]],    # line split in two boxes
    [BUILT[0], BUILT[1].replace("0512", "O5I2").replace("800229", "8OO229")],  # O/0, I/1 in digit fields
    [BUILT[0] + BUILT[1]],                                               # both lines in one box
])
def test_find_repairs_ocr_noise(lines: list[str]) -> None:
    found, clean = french_id.find(lines, TODAY), french_id.parse(BUILT, TODAY)
    assert found is not None and found.checks_passed == clean.checks_passed
    assert (found.number, found.birth_date, found.sex, found.given_names) == \
        (clean.number, clean.birth_date, clean.sex, clean.given_names)
    assert found.surname in ("DUPONT LAMBERT", "DUPONTKLAMBERT")  # a lone '<' read as K is a letter


def test_find_does_not_guess() -> None:
    # a misread card-number digit fails the number and the composite check: one passing digit could be
    # chance, so there is no zone reading at all (and no corrected number)
    assert french_id.find([BUILT[0], BUILT[1].replace("01234", "01284")], TODAY) is None
    # a misread given name fails only the composite: the reading stands, with the failure reported
    r = french_id.find([BUILT[0], BUILT[1].replace("MARIE", "MARIF")], TODAY)
    assert r is not None and r.checks_failed == ["mrz.composite"] and r.given_names == "MARIF ANNE"
    assert french_id.find(["CARTE NATIONALE D'IDENTITE", "IDFRA"], TODAY) is None
    assert french_id.find([BUILT[0]], TODAY) is None


# ---------------------------------------------------------------------------------- whole page

FRONT = ["REPUBLIQUE FRANCAISE", "CARTE NATIONALE D'IDENTITE N: 051275101234", "Nom: DUPONT LAMBERT",
         "Prénom(s): MARIE, ANNE", "Né(e) le: 29.02.1980"]
BACK = ["Adresse: 1 RUE DE LA PAIX", "75002 PARIS", "Carte valable jusqu'au : 14.05.2015",
        "délivrée le: 15.05.2005", "par: PREFECTURE DE POLICE"]


def test_page_front_and_back() -> None:
    r = read_document(page(*FRONT, *BUILT, *BACK), TODAY)
    assert r.doc_type == "id_card"
    assert r.fields == {"name": "DUPONT LAMBERT MARIE ANNE", "id_number": "051275101234", "expiry_date": "2015-05-14"}
    assert set(states(r).values()) == {"present"}
    assert {"mrz.number", "mrz.birth", "mrz.composite", "cross.number_mrz_vs_viz", "cross.birth_mrz_vs_viz"} \
        <= set(r.checks)
    assert r.check_failures == []


def test_page_front_only_expiry_absent_not_derived_from_issue_date() -> None:
    r = read_document(page(*FRONT, *BUILT), TODAY)
    assert r.fields["expiry_date"] is None and states(r)["expiry_date"] == "absent"
    assert r.fields["id_number"] == "051275101234"


def test_page_back_without_legible_date_is_unreadable() -> None:
    back = [x.replace("14.05.2015", "14.O5.2O15") for x in BACK]
    r = read_document(page(*FRONT, *BUILT, *back), TODAY)
    assert r.fields["expiry_date"] is None and states(r)["expiry_date"] == "unreadable"


def test_an_expiry_the_issue_date_and_the_number_agree_on_has_a_class_of_its_own() -> None:
    """The back's expiry is vouched for when it is its "délivrée le" date plus ten years (the day before) and the
    card number, whose check digit passed, begins with that issue's YYMM; a misread digit in either date or a
    number of another month leaves it a printed date no check covers."""
    from pipeline.formats.zone import PRINTED_VALIDITY_SPAN_CHECK
    from pipeline.trust.table import evidence_class

    def expiry_class(back: list[str]) -> tuple[str, bool]:
        r = read_document(page(*FRONT, *BUILT, *back), TODAY)
        assert r.fields["expiry_date"] is not None
        return (evidence_class("expiry_date", r.doc_type, r.checks, r.check_failures),
                PRINTED_VALIDITY_SPAN_CHECK in r.checks)

    # the built number (check digit passes) was issued in December 2005
    consistent = [x.replace("15.05.2005", "15.12.2005").replace("14.05.2015", "14.12.2015") for x in BACK]
    assert expiry_class(consistent) == ("expiry_date/mrz.expiry_printed_span", True)
    assert expiry_class(BACK) == ("expiry_date/mrz.expiry_none", False)  # issued in May: not this number's month
    misread_expiry = [x.replace("14.12.2015", "14.12.2016") for x in consistent]
    assert expiry_class(misread_expiry) == ("expiry_date/mrz.expiry_none", False)
    misread_issue = [x.replace("15.12.2005", "16.12.2005") for x in consistent]
    assert expiry_class(misread_issue) == ("expiry_date/mrz.expiry_none", False)
    # a number whose check digit fails vouches for nothing
    wrong_number = [BUILT[0], BUILT[1][:12] + "9" + BUILT[1][13:]]
    r = read_document(page(*FRONT, *wrong_number, *consistent), TODAY)
    assert PRINTED_VALIDITY_SPAN_CHECK not in r.checks


def test_the_validity_span_on_the_last_day_of_february() -> None:
    assert french_id.spans_validity("1602", date(2016, 2, 29), date(2026, 2, 27)) is False
    assert french_id.spans_validity("1602", date(2016, 2, 29), date(2026, 2, 28)) is True
    assert french_id.spans_validity("1603", date(2016, 3, 1), date(2026, 2, 28)) is True


def test_the_generator_and_the_reader_agree_on_every_issue_day() -> None:
    """The generator's French cards (`fr_1988_expiry`) end where the reader's span says, a 29 February issue too."""
    from datetime import timedelta

    from synth.render_national import fr_1988_expiry

    day = date(2012, 1, 1)
    while day <= date(2021, 8, 1):
        assert french_id.spans_validity(f"{day:%y%m}75012345", day, fr_1988_expiry(day)), day
        day += timedelta(days=1)
    assert fr_1988_expiry(date(2016, 2, 29)) == date(2026, 2, 28)
