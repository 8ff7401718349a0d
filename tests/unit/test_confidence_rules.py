"""Rules no calibration table overrides (`pipeline.trust.rules`, issue 29 item 4), and the evidence the PRC
card's fields get of their own: per-character recognition scores and the statutory validity span."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef, Extraction, FieldReading
from pipeline.formats.cn_id import statutory_span
from pipeline.formats.document import OcrLine, read_document
from pipeline.formats.lines import value_score
from pipeline.trust.rules import DISAGREEMENT_CAP, cap_disagreements, disagreeing_fields
from pipeline.trust.table import Calibration, evidence_class
from tests.unit.test_fields_document import BACK, FRONT, NUMBER, page, states
from tests.unit.test_fields_driving_licence import BUILT
from tests.unit.test_fields_driving_licence import FRONT as LICENCE_FRONT

TODAY = date(2026, 6, 1)
SURE = {"edges": [0.0], "values": [0.999], "counts": [5000]}  # a table that trusts every reading it sees
TRUSTING = Calibration.from_dict({"unseen_cap": 0.999, "classes": {
    f"{k}/{c}": SURE for k in ("name", "id_number", "expiry_date")
    for c in ("mrz.name_vs_printed_failed", "mrz.number_passed", "mrz.expiry_passed", "cn.passed")}})


def _extraction(reading, doc_type: str) -> Extraction:
    ref = DocumentRef(path=Path("x.jpg"), rel_path="x.jpg", sha256="0" * 64)
    return Extraction(ref=ref, fields={"doc_type": doc_type, **reading.fields}, backend="ocr", model="m",
                      field_states=dict(reading.states), checks=list(reading.checks),
                      check_failures=list(reading.check_failures))


# ------------------------------------------------------- a field whose sources disagree is never auto-accepted

def test_a_disagreeing_field_is_capped_below_the_threshold_whatever_the_table_says() -> None:
    """The printed number differs from the zone's (which passes its check digit): the table would give the
    number 0.999, the rule caps it; the fields that agree keep the table's value."""
    td3 = ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]
    r = read_document(page("PASSPORT", "Surname", "ERIKSSON", "Given names", "ANNA MARIA",
                           "Passport No.", "L898902C4", *td3), date(2011, 1, 1))
    assert "cross.number_mrz_vs_viz" in r.check_failures and r.states["id_number"].state == "present"
    out = TRUSTING.apply(_extraction(r, r.doc_type))
    assert out.field_states["id_number"].confidence == DISAGREEMENT_CAP < 0.95
    assert out.field_states["expiry_date"].confidence == 0.999


def test_cap_disagreements_is_one_function_for_any_backend() -> None:
    """A VLM answer carries its own checks: `extra` names which of them are disagreements."""
    ref = DocumentRef(path=Path("x.jpg"), rel_path="x.jpg", sha256="0" * 64)
    ex = Extraction(ref=ref, fields={"doc_type": "passport", "name": "A B", "id_number": "X1", "expiry_date": None},
                    backend="openai", model="m", checks=[], check_failures=["vlm.number_vs_mrz"],
                    field_states={"name": FieldReading("A B", "present", 0.99),
                                  "id_number": FieldReading("X1", "present", 0.99),
                                  "expiry_date": FieldReading.absent()})
    assert cap_disagreements(ex) is ex  # no check it knows failed
    capped = cap_disagreements(ex, {"vlm.number_vs_mrz": "id_number"})
    assert capped.field_states["id_number"].confidence == DISAGREEMENT_CAP
    assert capped.field_states["name"].confidence == 0.99 and capped.field_states["expiry_date"].state == "absent"
    assert disagreeing_fields(["cn_id.birth_matches_printed"]) == {"id_number"}
    assert disagreeing_fields(["mrz.number"]) == set()  # a failed check digit is no second source


def test_a_prc_number_whose_printed_birth_date_disagrees_is_not_accepted() -> None:
    r = read_document(page("姓名张三", "性别男", "出生 1996 年 7 月 17 日", "公民身份号码", NUMBER), TODAY)
    assert "cn_id.birth_matches_printed" in r.check_failures
    out = TRUSTING.apply(_extraction(r, "cn_id"))
    assert out.field_states["id_number"].confidence <= DISAGREEMENT_CAP


# ----------------------------------------------- a zone name closed by fillers is complete: more letters disagree

AZE_TD3 = ["PCAZEABDULLAYEV<<DIL<<<<<<<<<<<<<<<<<<<<<<<<", "C193895647AZE9408148M28081525188L2V<<<<<<<42"]


def test_a_printed_name_adding_words_to_a_closed_zone_name_is_a_disagreement() -> None:
    """The zone closes ABDULLAYEV<<DIL with fillers: the printed "ADIL BƏKIR OĞLU" is not its continuation.
    The printed reading is kept for the person, but the cross-check fails and the name is never accepted."""
    r = read_document(page("Soyadi/Surname", "ABDULLAYEV", "Adi, atasinin adi/Given name, patronymic",
                           "ADIL BƏKIR OĞLU", "DIL", *AZE_TD3), TODAY)
    assert "cross.name_mrz_vs_viz" in r.check_failures
    assert "cross.name_printed_extends_mrz" not in r.checks
    assert evidence_class("name", r.doc_type, r.checks, r.check_failures) == "name/mrz.name_vs_printed_failed"
    assert TRUSTING.apply(_extraction(r, r.doc_type)).field_states["name"].confidence <= DISAGREEMENT_CAP


def test_a_zone_name_cut_by_the_field_width_may_still_be_continued_by_the_print() -> None:
    """A TD1 name line filled to its last place (no closing fillers): the print may carry the rest."""
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6",
           "WOLFESCHLEGELSTEINHAUSEN<<ANNA"]
    r = read_document(page("Surname", "WOLFESCHLEGELSTEINHAUSEN", "Given names", "ANNA MARIA", *td1), TODAY)
    assert "cross.name_printed_extends_mrz" in r.checks and "cross.name_mrz_vs_viz" not in r.check_failures
    assert r.fields["name"] == "WOLFESCHLEGELSTEINHAUSEN ANNA MARIA"


def test_a_licence_surname_with_a_letter_more_than_its_closed_zone_prefix_is_a_disagreement() -> None:
    """DURAND<< closes the surname: a mark printed after it read as a letter ("DURANDI") makes another
    surname, not the zone's continued."""
    lines = [x.replace("1. DURAND", "1. DURANDI") for x in LICENCE_FRONT]
    r = read_document(page(*lines, BUILT), TODAY)
    assert "cross.name_mrz_vs_viz" in r.check_failures and states(r)["name"] == "unreadable"
    assert read_document(page(*LICENCE_FRONT, BUILT), TODAY).fields["name"] == "DURAND CLAIRE MARIE"


def test_a_licence_prefix_cut_at_eight_letters_is_continued_by_the_print() -> None:
    from pipeline.formats import mrz

    head = "D1FRA19AB12345" + str(mrz.check_digit("D1FRA19AB12345")) + "340101" + "MARTINEZ"
    zone = head + str(mrz.check_digit(head))
    front = [x.replace("1. DURAND", "1. MARTINEZLOPEZ") for x in LICENCE_FRONT]
    r = read_document(page(*front, zone), TODAY)
    assert r.fields["name"] == "MARTINEZLOPEZ CLAIRE MARIE" and "cross.name_mrz_vs_viz" in r.checks


# ------------------------------------------------------------------------------ the PRC card's own evidence

def test_a_name_is_as_sure_as_its_least_sure_character() -> None:
    box = ((0.0, 0.0), (100.0, 0.0), (100.0, 20.0), (0.0, 20.0))
    line = OcrLine("姓名张三丰", 0.9, box, (0.99, 0.99, 0.98, 0.61, 0.97))
    assert value_score([line], "张三丰") == 0.61
    assert value_score([OcrLine("姓名张三丰", 0.9, box)], "张三丰") == 0.9  # no per-character scores: the box's
    assert value_score([line], "李四") == 0.9  # not held verbatim: the mean of the boxes


def test_the_prc_name_raw_score_is_its_weakest_character() -> None:
    lines = page(*FRONT)
    unsure = [OcrLine(x.text, x.score, x.box, tuple([0.99, 0.99, 0.99, 0.55] if x.text == "姓名张三" else []))
              for x in lines]
    assert read_document(unsure, TODAY).states["name"].confidence == 0.55
    assert read_document(lines, TODAY).states["name"].confidence == 0.98  # no character scores: the box's


@pytest.mark.parametrize(("start", "end", "span"), [
    (date(2015, 3, 1), date(2035, 3, 1), True), (date(2015, 3, 1), date(2025, 3, 1), True),
    (date(2016, 2, 29), date(2026, 2, 28), True), (date(2015, 3, 1), date(2035, 3, 7), False),
    (date(2015, 3, 1), date(2030, 3, 1), False), (None, date(2035, 3, 1), False), (date(2015, 3, 1), "long-term", False),
])
def test_statutory_span(start, end, span) -> None:
    assert statutory_span(start, end) is span


def test_the_validity_span_and_long_term_are_their_own_evidence_classes() -> None:
    spanned = read_document(page(*BACK[:3], ("有效期限", "2010.12.12-2020.12.12")), TODAY)
    assert evidence_class("expiry_date", "cn_id", spanned.checks, []) == "expiry_date/cn.validity_span"
    odd = read_document(page(*BACK), TODAY)  # 2010.01.01-2020.12.12: no statutory period
    assert evidence_class("expiry_date", "cn_id", odd.checks, []) == "expiry_date/cn.validity"
    life = read_document(page(*BACK[:3], ("有效期限", "2010.12.12-长期")), TODAY)
    assert evidence_class("expiry_date", "cn_id", life.checks, []) == "expiry_date/cn.validity_long_term"


def test_letters_of_a_printed_number_never_confirm_a_zone_name() -> None:
    """A zone name that lost letters ("L" for ERIKSSON) is not confirmed by the "L" and "C" that folding the
    printed passport number L898902C3 would leave: only tokens without digits are name words."""
    td3 = ["P<UTOL<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]
    r = read_document(page("PASSPORT", "Passport No.", "L898902C3", "Given names", "ANNA MARIA", *td3),
                      date(2011, 1, 1))
    assert "cross.name_mrz_vs_viz" not in r.checks
    assert evidence_class("name", r.doc_type, r.checks, r.check_failures) != "name/mrz.name_vs_printed_passed"
