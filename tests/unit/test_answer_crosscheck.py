"""Which fields of a VLM answer the embedded OCR is asked about, and what its reading does to their evidence
(`answer_evidence.unproven`, `with_ocr_reading`): pure functions, no OCR run."""

from __future__ import annotations

from datetime import date

from pipeline.datamodel import FieldReading
from pipeline.extract.model.answer_evidence import VS_OCR, AnswerEvidence, judge, unproven, with_ocr_reading
from pipeline.formats.cn_id import check_char

PRC_NUMBER = "11010519491231002" + check_char("11010519491231002")


def prc_answer(name: str = "王小明", expiry: str | None = "2031-05-04") -> dict:
    return {"doc_type": "cn_id", "name": name, "id_number": PRC_NUMBER, "expiry_date": expiry}


def test_a_prc_card_s_name_and_validity_are_unproven_its_checksummed_number_is_not() -> None:
    fields = prc_answer()
    judged = judge(fields, AnswerEvidence(), None)
    assert sorted(unproven(fields, judged)) == ["expiry_date", "name"]


def test_an_ocr_reading_alike_gives_the_agreeing_class_and_another_value_a_disagreement() -> None:
    fields = prc_answer()
    judged = judge(fields, AnswerEvidence(), None)
    ocr = {"name": FieldReading("王 小明", "present", 0.9), "expiry_date": FieldReading("2031-05-14", "present", 0.9),
           "id_number": FieldReading(PRC_NUMBER, "present", 0.9)}
    after = with_ocr_reading(fields, judged, ocr, unproven(fields, judged))
    assert after.classes["name"] == "name/cn.passed+ocr/nolp"
    assert after.classes["expiry_date"] == "expiry_date/disagrees"
    assert after.classes["id_number"] == "id_number/cn.passed/nolp"  # proven: not compared
    assert VS_OCR["name"] in after.checks and VS_OCR["expiry_date"] in after.failures


def test_a_value_the_ocr_sees_no_field_for_disagrees_and_an_unreadable_one_is_no_evidence() -> None:
    fields = prc_answer()
    judged = judge(fields, AnswerEvidence(), None)
    ocr = {"name": FieldReading.absent(), "expiry_date": FieldReading(None, "unreadable", 0.0)}
    after = with_ocr_reading(fields, judged, ocr, ["name", "expiry_date"])
    assert after.classes["name"] == "name/disagrees"
    assert after.classes["expiry_date"] == judged.classes["expiry_date"]


def test_a_field_that_already_disagrees_is_not_read_again() -> None:
    fields = prc_answer()
    judged = judge(fields, AnswerEvidence(printed={"name": "王小朋", "id_number": None}), None)
    assert judged.classes["name"] == "name/disagrees"
    assert unproven(fields, judged) == ["expiry_date"]



# A generated card's zone (all four check digits pass). Its data line and the 9-character number make a 45-character
# line, one over a passport's: among the 45 ways to drop one character, one passes a passport line's personal-number
# and final check digits by chance, so read as a passport it would out-score the card's own format.
TD2 = ("I<UTOJANSEN<<OLIVER<ANNA<<<<<<<<<<<<", "AK20895620UTO9812220M2706030JR928892")


def td2_answer(name: str) -> dict:
    return {"doc_type": "id_card", "name": name, "id_number": "AK2089562", "expiry_date": "2027-06-03"}


def test_a_td2_zone_is_judged_as_td2_though_its_line_and_the_number_would_fill_a_td3_line() -> None:
    name = "JANSEN OLIVER ANNA"
    right = judge(td2_answer(name), AnswerEvidence(mrz=TD2, printed={"name": name}), None, date(2026, 1, 1))
    assert right.classes["name"] == "name/mrz.name_vs_printed_passed/nolp"
    assert "mrz.personal" not in right.checks  # a passport line's check: the number was not read as zone text
    misspelt = "JANSEN OLIVIER ANNA"  # the answer's name, not its zone's: the two readings disagree
    misread = judge(td2_answer(misspelt), AnswerEvidence(mrz=TD2, printed={"name": misspelt}), None, date(2026, 1, 1))
    assert misread.classes["name"] == "name/disagrees"
