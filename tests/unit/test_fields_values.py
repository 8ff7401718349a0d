"""Printed values cleaned before they are compared or stored: marks, field numbers and label words removed; a
document number without the format's shape, or half a name, unreadable; PRC names in simplified characters."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.document import OcrLine, read_document
from pipeline.formats.names import simplified
from pipeline.formats.printed_zone import label_kind
from pipeline.formats.values import clean_name, clean_number

TODAY = date(2026, 6, 1)
TD3 = ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]


def page(*rows: str, score: float = 0.98, height: float = 20.0) -> list[OcrLine]:
    """One box per row, each under the previous one in the same column (a label above its value)."""
    lines = []
    for r, text in enumerate(rows):
        top, right = 10 + r * 2 * height, 10.0 + 10 * len(text)
        lines.append(OcrLine(text, score, ((10.0, top), (right, top), (right, top + height), (10.0, top + height))))
    return lines


@pytest.mark.parametrize(("raw", "clean"), [
    ("„MÜLLER“", "MÜLLER"),
    ('"SMITH"', "SMITH"),
    ("«DUPONT»", "DUPONT"),
    ("'ERIKSSON'", "ERIKSSON"),
    ("‚ROSSI‘ ANNA", "ROSSI ANNA"),
    ("O'NEIL", "O'NEIL"),  # an apostrophe between letters is part of the name
    ("D’ARCY MARIE", "D’ARCY MARIE"),
    ("1. SMITH", "SMITH"),
    ("2.ANNA MARIA", "ANNA MARIA"),
    ("4a. MARTIN", "MARTIN"),
    ("Nom: DUPONT", "DUPONT"),
    ("Surname / SMITH", "SMITH"),
    ("NOM/SURNAME DUPONT", "DUPONT"),
    ("DUPONT Prénoms", "DUPONT"),
    ("NOMURA KENJI", "NOMURA KENJI"),  # a name that merely starts like a label word stays
    ("NOM", "NOM"),  # capitals without a separator: may be a value, kept
    ("Surname", ""),
    ("“ ”", ""),
])
def test_clean_name(raw: str, clean: str) -> None:
    assert clean_name(raw) == clean


@pytest.mark.parametrize(("raw", "clean"), [
    ('"L898902C3"', "L898902C3"),
    ("5. D1234567", "D1234567"),
    ("N° 940992310285", "940992310285"),
    ("No. X1234567", "X1234567"),
    ("NO1234567", "NO1234567"),  # letters that begin the number, not a label
    ("12.345.678", "12.345.678"),  # digits with periods are the number, not a field number
    ("AB 12 34 56", "AB123456"),
])
def test_clean_number(raw: str, clean: str) -> None:
    assert clean_number(raw) == clean


def test_surname_variant_makes_a_surname_label() -> None:
    assert label_kind("Name/Surname") == "surname"
    assert label_kind("Name") == "name"
    assert label_kind("Vornamen/Given names") == "given"


# --------------------------------------------------------------------------------- read_document


def test_marks_round_a_printed_surname_do_not_reach_the_name() -> None:
    r = read_document(page("Surname", "„ERIKSSON“", "Given names", "ANNA MARIA", "Passport No", "L898902C3"), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA MARIA"


def test_field_numbers_and_marks_do_not_make_the_printed_name_disagree_with_the_zone() -> None:
    r = read_document(page("Surname", '1. "ERIKSSON"', "Given names", "2. ANNA MARIA", *TD3), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA MARIA"
    assert "cross.name_mrz_vs_viz" in r.checks and "cross.name_mrz_vs_viz" not in r.check_failures


def test_word_under_the_number_label_is_no_document_number() -> None:
    """The zone's data line cut off: the page's word for "passport" under the number label is not stored."""
    r = read_document(page("PASAPORTE", "Surname", "GARCIA", "Given names", "MARIA", "Passport No", "PASAPORTE",
                           "P<ESPGARCIA<<MARIA<<<<<<<<<<<<<<<<<<<<<<<<<<<"), TODAY)
    assert r.fields["id_number"] is None
    assert r.states["id_number"].state == "unreadable"
    assert "number.shape" in r.check_failures


def test_printed_number_with_digits_is_still_read() -> None:
    r = read_document(page("PASSPORT", "Passport No", "N° X1234567"), TODAY)
    assert r.fields["id_number"] == "X1234567"


def test_given_names_alone_are_no_name() -> None:
    """Surname and given names labelled apart, the surname's value lost: the given names are half the name."""
    r = read_document(page("IDENTITY CARD", "Surname", "Given names", "ANNA MARIA", "Document No", "X1234567"), TODAY)
    assert r.fields["name"] is None
    assert r.states["name"].state == "unreadable"


def test_surname_alone_is_no_name() -> None:
    r = read_document(page("IDENTITY CARD", "Surname", "SPECIMEN", "Document No", "X1234567"), TODAY)
    assert r.fields["name"] is None


def test_name_label_with_a_surname_variant_joins_the_given_names() -> None:
    r = read_document(page("PERSONALAUSWEIS", "Name/Surname", "MUSTERMANN", "Vornamen/Given names", "ERIKA",
                           "Document No", "T22000129"), TODAY)
    assert r.fields["name"] == "MUSTERMANN ERIKA"


def test_a_full_name_label_alone_still_reads() -> None:
    r = read_document(page("PASSPORT", "Name", "ANNA MARIA ERIKSSON", "Passport No", "X1234567"), TODAY)
    assert r.fields["name"] == "ANNA MARIA ERIKSSON"


@pytest.mark.parametrize(("read", "printed"), [("張強", "张强"), ("王伟", "王伟"), ("鐘明", "钟明"),
                                               ("李乾", "李乾"), ("於梅", "於梅")])
def test_simplified(read: str, printed: str) -> None:
    assert simplified(read) == printed


def test_prc_name_read_in_traditional_characters_is_stored_simplified() -> None:
    number = "11010519491231002X"
    r = read_document(page("姓名張強", "性别男民族汉", "出生1949年12月31日", "住址北京市", f"公民身份号码{number}"),
                      TODAY)
    assert r.doc_type == "cn_id"
    assert r.fields["name"] == "张强"
    assert r.fields["id_number"] == number
