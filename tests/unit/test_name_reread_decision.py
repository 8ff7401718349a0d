"""The decision rules of the printed-name second reading (pipeline/extract/ocr/name_reread.py), on OCR lines laid out
as a passport's data page: a re-read line counts only when the page, read again by the same rules, confirms the
zone's name with it."""

from __future__ import annotations

from datetime import date

from pipeline.extract.ocr import name_reread
from pipeline.formats.document import OcrLine, read_document

TODAY = date(2026, 11, 30)
NAME_LINE = "P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<"
DATA_LINE = "L898902C36UTO7408122F3204159ZE184226B<<<<<10"


def _box(left: float, top: float, right: float, bottom: float) -> tuple[tuple[float, float], ...]:
    return ((left, top), (right, top), (right, bottom), (left, bottom))


SURNAME = OcrLine("ERIKSSON", 0.9, _box(380, 225, 520, 250))
GIVEN = OcrLine("ANNA MARIA", 0.9, _box(380, 285, 540, 310))


def _page(surname: OcrLine, given: OcrLine = GIVEN) -> list[OcrLine]:
    return [OcrLine("Surname / Nom", 0.98, _box(380, 200, 560, 220)), surname,
            OcrLine("Given names / Prénoms", 0.99, _box(380, 260, 640, 280)), given,
            OcrLine("L898902C3", 0.97, _box(380, 340, 520, 365)),
            OcrLine(NAME_LINE, 0.95, _box(20, 700, 1250, 735)),
            OcrLine(DATA_LINE, 0.95, _box(20, 770, 1250, 805))]


def _misread() -> tuple[list[OcrLine], OcrLine]:
    wrong = OcrLine("ERIKSS0M", 0.6, SURNAME.box)
    return _page(wrong), wrong


def test_the_first_pass_misreading_leaves_the_zone_name_unconfirmed():
    lines, _ = _misread()
    first = read_document(lines, TODAY)
    assert "mrz.number" in first.checks
    assert name_reread.needs_reread(first)
    assert name_reread.targets(lines, first.fields["name"])[0].text == "ERIKSS0M"


def test_a_reread_that_reads_the_zone_name_confirms_it_like_a_first_pass():
    lines, wrong = _misread()
    first = read_document(lines, TODAY)
    candidate = read_document([SURNAME if x is wrong else x for x in lines], TODAY)
    assert name_reread.accepts(first, candidate, agreed=False)
    clean = read_document(_page(SURNAME), TODAY)
    assert candidate.fields == clean.fields and set(candidate.checks) == set(clean.checks)
    assert "cross.name_mrz_vs_viz" in candidate.checks


def test_a_reread_that_disagrees_confirms_nothing():
    lines, wrong = _misread()
    first = read_document(lines, TODAY)
    other = OcrLine("ERIKSEN", 0.99, SURNAME.box)
    candidate = read_document([other if x is wrong else x for x in lines], TODAY)
    assert "cross.name_mrz_vs_viz" not in candidate.checks
    assert not name_reread.accepts(first, candidate, agreed=True)


def test_without_a_zone_a_name_needs_the_variants_to_agree():
    printed = [x for x in _page(SURNAME) if "<" not in x.text]
    first = read_document([x for x in printed if x is not SURNAME], TODAY)
    candidate = read_document(printed, TODAY)
    assert candidate.fields["name"] == "ERIKSSON ANNA MARIA"
    assert not name_reread.accepts(first, candidate, agreed=False)
    assert name_reread.accepts(first, candidate, agreed=True)


def test_variants_agree_only_by_a_majority_of_each_box():
    a, b = OcrLine("ERIKSSON", 0.9, SURNAME.box), OcrLine("ERIKSS0N", 0.9, SURNAME.box)
    other = OcrLine("ANNA MARIA", 0.9, GIVEN.box)
    box, second = SURNAME, GIVEN
    assert name_reread.agreed_by_most([box], [{box: a}, {box: a}, {box: b}])
    assert name_reread.voted([{box: b}, {box: a}, {box: a}])[box] is a
    assert not name_reread.agreed_by_most([box], [{box: a}, {box: b}])
    assert not name_reread.agreed_by_most([box, second], [{box: a, second: other}, {box: a}, {box: a}])
