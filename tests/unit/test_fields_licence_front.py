"""Photocard driving licence fronts without a zone (`pipeline.formats.licence_front`), read from OCR-like boxes laid
out as the card prints them: numbered fields, each field number in a box of its own or with its value; the UK
number stored only when it spells the surname, initials and birth date printed beside it."""

from __future__ import annotations

from datetime import date

from pipeline.formats.document import OcrLine, read_document
from pipeline.formats.licence_front import numbered_fields, uk_number_agrees, uk_number_read
from pipeline.trust.table import evidence_class

TODAY = date(2026, 6, 1)


def box(text: str, left: float, top: float, height: float = 20.0) -> OcrLine:
    right = left + 0.6 * height * len(text)
    return OcrLine(text, 0.97, ((left, top), (right, top), (right, top + height), (left, top + height)))


def numbered(number: str, value: str, top: float, left: float = 240, apart: bool = True) -> list[OcrLine]:
    """A field number and its value: two boxes on one row (small number, then value), or one box."""
    if not apart:
        return [box(f"{number} {value}", left, top)]
    small = box(number, left, top + 4, 14)
    return [small, box(value, small.right + 10, top)]


def uk_front(surname: str = "MORGAN", given: str = "SARAH MEREDYTH", birth: str = "11.03.1976",
             number: str = "MORGA753116SM9IJ 35", apart: bool = True, title: str = "UNITED KINGDOM") -> list[OcrLine]:
    return [box("UK", 40, 30), box("DRIVING LICENCE", 230, 14, 30), box(title, 560, 26, 18),
            *numbered("1.", surname, 90, apart=apart), *numbered("2.", given, 140, apart=apart),
            *numbered("3.", f"{birth} UNITED KINGDOM", 190, apart=apart),
            *numbered("4a.", "19.01.2013", 240, apart=apart), *numbered("4c.", "DVLA", 240, 500, apart=apart),
            *numbered("4b.", "18.01.2033", 290, apart=apart), *numbered("5.", number, 340, apart=apart),
            *numbered("8.", "122 BURNS CRESCENT EDINBURGH EH1 9GP", 390, apart=apart)]


def test_a_uk_front_gives_name_number_and_expiry_whether_field_numbers_stand_apart_or_not() -> None:
    for apart in (True, False):
        reading = read_document(uk_front(apart=apart), TODAY)
        assert (reading.format, reading.doc_type) == ("licence_front", "driving_licence")
        assert reading.fields == {"name": "MORGAN SARAH MEREDYTH", "id_number": "MORGA753116SM9IJ",
                                  "expiry_date": "2033-01-18"}
        assert "printed.issuer_front" in reading.checks
        assert {evidence_class(f, reading.doc_type, reading.checks, reading.check_failures)
                for f in reading.fields} == {f"{f}/printed.issuer_front" for f in reading.fields}


def test_the_uk_number_must_spell_the_printed_surname_initials_and_birth_date() -> None:
    assert uk_number_agrees("MORGA753116SM9IJ", "MORGAN", "SARAH MEREDYTH", date(1976, 3, 11))
    assert uk_number_agrees("MORGA853116SM9IJ", "MORGAN", "SARAH MEREDYTH", date(1976, 3, 11)) is False  # decade
    assert uk_number_agrees("MORGA753126SM9IJ", "MORGAN", "SARAH MEREDYTH", date(1976, 3, 11)) is False  # day
    assert uk_number_agrees("LEE99606043E99YL", "LEE", "EMILY", date(1963, 6, 4))  # 9-padded surname, one name
    assert uk_number_agrees("LEE99656043E99YL", "LEE", "EMILY", date(1963, 6, 4))  # a woman's month + 50
    assert uk_number_agrees("OBRIE753116SM9IJ", "O'BRIEN", "SARAH MEREDYTH", None)  # letters only; no birth read
    # a surname or a number misread: one of them is wrong, nothing says which, so no number is stored
    for damaged in (uk_front(surname="MORGEN"), uk_front(number="MORGA753116SN9IJ 35"),
                    uk_front(birth="11.08.1976")):
        reading = read_document(damaged, TODAY)
        assert reading.fields["id_number"] is None and "dl.uk_number" in reading.check_failures
        assert "printed.issuer_front" not in reading.checks


def test_a_uk_numbers_look_alikes_are_read_as_its_places_hold_and_the_title_is_no_name() -> None:
    # 0 for O among the surname's letters, S for 5 among the birth date's digits: each place holds one kind
    reading = read_document(uk_front(given="MISS SARAH MEREDYTH", number="M0RGA7S3116SM9IJ 35"), TODAY)
    assert reading.fields["id_number"] == "MORGA753116SM9IJ" and reading.fields["name"] == "MORGAN SARAH MEREDYTH"
    assert uk_number_read("LEE99606043E99YL") == "LEE99606043E99YL"  # the 9s padding a short surname stay 9s
    # the DVLA writes a MAC prefix as MC
    assert uk_number_agrees("MCDON753116SM9IJ", "MACDONALD", "SARAH MEREDYTH", date(1976, 3, 11))


def test_a_uk_number_of_another_shape_is_unreadable_never_stored() -> None:
    reading = read_document(uk_front(number="MORGA75311GSM9IJ 35"), TODAY)
    assert reading.fields["id_number"] is None and "number.shape" in reading.check_failures


def test_another_issuers_licence_front_is_read_but_stays_below_the_threshold_class() -> None:
    lines = [box("FÜHRERSCHEIN", 230, 14, 30), box("BUNDESREPUBLIK DEUTSCHLAND", 230, 50, 16),
             *numbered("1.", "MUSTERMANN", 90), *numbered("2.", "ERIKA", 140),
             *numbered("3.", "12.08.1964 BERLIN", 190), *numbered("4b.", "13.01.2033", 290),
             *numbered("4d.", "640812345", 320), *numbered("5.", "B072RRE2I55", 340)]  # 4d: a personal number
    reading = read_document(lines, TODAY)
    assert (reading.format, reading.doc_type) == ("licence_front", "driving_licence")
    assert reading.fields == {"name": "MUSTERMANN ERIKA", "id_number": "B072RRE2I55", "expiry_date": "2033-01-13"}
    assert evidence_class("name", reading.doc_type, reading.checks, reading.check_failures) == "name/printed"


def test_a_us_licence_front_gives_field_4d_as_its_number_without_the_short_labels() -> None:
    lines = [box("CALIFORNIA", 230, 14, 30), box("DRIVER LICENSE", 520, 20, 18), *numbered("4d", "DL I1234568", 80),
             *numbered("4b", "EXP 08/31/2029", 120), *numbered("1", "LN SAMPLE", 160), *numbered("2", "FN ALEXANDER J",
                                                                                                   200),
             *numbered("5", "DD 00/00/0000NNNAN/ANFD/YY", 400)]
    reading = read_document(lines, TODAY)
    assert (reading.format, reading.doc_type) == ("licence_front", "driving_licence")
    assert reading.fields == {"name": "SAMPLE ALEXANDER J", "id_number": "I1234568", "expiry_date": "2029-08-31"}
    assert evidence_class("name", reading.doc_type, reading.checks, reading.check_failures) == "name/printed"


def test_dates_days_and_issue_numbers_are_not_field_numbers() -> None:
    lines = [box("11.03.1976", 240, 90), box("35", 600, 90), box("2015", 240, 140), box("1.", 240, 190, 14),
             box("MORGAN", 270, 186)]
    assert numbered_fields(lines) == {"1": ("MORGAN", 0.97)}


def test_a_page_without_a_licence_title_is_no_licence_front() -> None:
    lines = [box("IDENTITY CARD", 230, 14, 30), *numbered("1.", "MORGAN", 90), *numbered("2.", "SARAH", 140)]
    assert read_document(lines, TODAY).format != "licence_front"
