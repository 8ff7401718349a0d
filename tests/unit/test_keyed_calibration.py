"""One keyed confidence model: tables per (backend, model, prompt), unknown confidence without one, the shipped
table as the OCR's; and the answer evidence's pure parts (value spans of log-probabilities, malformed evidence)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from pipeline.datamodel import DocumentRef, Extraction, FieldReading
from pipeline.extract.model.answer_evidence import split_answer, value_scores
from pipeline.extract.registry import fingerprint
from pipeline.settings import Settings
from pipeline.trust.fit import fit, wilson
from pipeline.trust.rules import DISAGREEMENT_CAP
from pipeline.trust.table import Calibration, Scorer, TableKey, Tables, ocr_key, shipped, unknown

KEY = TableKey("openai", "qwen3.5-vl", "extract_v3.en")


def extraction(**states: FieldReading) -> Extraction:
    ref = DocumentRef(Path("/x.jpg"), "x.jpg", "0" * 64)
    return Extraction(ref=ref, fields={"doc_type": "passport"}, backend="openai", model="qwen3.5-vl",
                      field_states=states, evidence={k: f"{k}/mrz.number_passed/nolp" for k in states})


def table(classes: dict[str, bool], n: int = 60) -> dict:
    obs = [{"class": c, "raw": 1.0, "correct": right or i % 2 == 0, "manifest": "t"}
           for c, right in classes.items() for i in range(n)]
    return fit(obs)


def test_a_table_without_key_is_the_embedded_ocr_table() -> None:
    assert shipped().table_key == ocr_key() and ocr_key().backend == "ocr" and ocr_key().prompt is None
    assert shipped().table_id.startswith("ocr/")


def test_a_stored_table_is_found_by_its_key_only(tmp_path: Path) -> None:
    tables = Tables(tmp_path)
    path = tables.save(KEY, table({"id_number/mrz.number_passed/nolp": True}))
    assert json.loads(path.read_text())["key"] == KEY.as_dict()
    found = tables.find(KEY)
    assert found is not None and found.table_key == KEY
    assert tables.find(TableKey("openai", "another-model", "extract_v3.en")) is None
    assert tables.find(TableKey("openai", "qwen3.5-vl", "extract_v3.zh")) is None
    assert tables.find(ocr_key()) == shipped()  # the OCR key falls back to the shipped table


def test_without_a_table_confidence_is_unknown_never_made_up(tmp_path: Path) -> None:
    ex = extraction(id_number=FieldReading("L898902C3", "present", 1.0), expiry_date=FieldReading.absent())
    scored = Scorer.for_key(KEY, tmp_path)(ex)
    assert scored.field_states["id_number"].confidence is None and scored.calibration is None
    assert scored.field_states["expiry_date"] == FieldReading.absent()
    assert unknown(ex).field_states["id_number"].confidence is None


def test_a_table_scores_with_its_id_and_raw_mode_leaves_scores(tmp_path: Path) -> None:
    Tables(tmp_path).save(KEY, table({"id_number/mrz.number_passed/nolp": True}))
    ex = extraction(id_number=FieldReading("L898902C3", "present", 1.0))
    scored = Scorer.for_key(KEY, tmp_path)(ex)
    # 60 right of 60: the lower end of the 95% Wilson interval, rounded down
    assert scored.field_states["id_number"].confidence == math.floor(wilson(60, 60)[0] * 10000) / 10000
    assert scored.calibration is not None and scored.calibration.startswith("openai/qwen3.5-vl/extract_v3.en#")
    assert Scorer.for_key(KEY, tmp_path, raw=True)(ex) == ex


def test_a_disagreement_is_capped_below_any_threshold_whatever_the_table_says() -> None:
    cal = Calibration.from_dict(table({"name/disagrees": True}, n=500))
    assert cal.confidence("name/disagrees", 1.0) == DISAGREEMENT_CAP < 0.95


def test_a_name_read_from_a_shaken_box_is_held_below_the_threshold_whatever_the_table_says() -> None:
    """A PRC name read alone from a box smeared by camera shake: the recogniser's sure score is no evidence, so its
    classes stay at the unseen cap however many right observations a table has; the sharp class gets what the
    table says; a model's answer floored by such an embedded reading gets no more than the cap either."""
    classes = {"name/cn.passed_shaken": True, "name/cn.passed_labels_misread_shaken": True, "name/cn.passed": True}
    cal = Calibration.from_dict(table(classes, n=1000))
    assert cal.confidence("name/cn.passed", 1.0) > 0.99
    for cls in ("name/cn.passed_shaken", "name/cn.passed_labels_misread_shaken"):
        assert cal.confidence(cls, 1.0) == cal.unseen_cap < 0.95, cls
    ocr = Extraction(ref=DocumentRef(Path("/x.jpg"), "x.jpg", "0" * 64), fields={"doc_type": "cn_id"},
                     backend="ocr", model="m", field_states={"name": FieldReading("李明", "present", 0.999)},
                     checks=["cn_id.checksum"], check_failures=["capture.field_sharp"])
    assert cal.apply(ocr).field_states["name"].confidence == cal.unseen_cap
    answer = dataclasses.replace(extraction(name=FieldReading("李明", "present", None)),
                                 embedded={"name": ("name/cn.passed_shaken", 0.999)})
    assert cal.apply(answer, embedded=cal).field_states["name"].confidence == cal.unseen_cap
    # the shipped table has measured the shaken classes (it says how often they were right) and is held all the same
    assert all(sum(shipped().curves[c].counts) >= 300 for c in classes)
    assert shipped().confidence("name/cn.passed_shaken", 1.0) < 0.95


def test_calibration_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    base = Settings()
    moved = base.model_copy(update={"calibration": base.calibration.model_copy(update={"dir": tmp_path})})
    assert fingerprint(base) == fingerprint(moved)


def test_each_field_scores_its_own_lowest_token() -> None:
    text = '{"doc_type": "passport", "name": "ANNA", "printed": {"name": "ANNX"}, "id_number": "L8", ' \
           '"expiry_date": null}'
    tokens = [(c, math.log(0.5) if c == "X" else math.log(0.9) if c == "N" else 0.0) for c in text]
    scores = value_scores(text, tokens)
    assert scores["name"] == 0.9  # the nested printed copy's X is not the name's
    assert scores["id_number"] == 1.0 and "expiry_date" not in scores


def test_malformed_evidence_is_no_evidence() -> None:
    fields, evidence = split_answer({"name": "A B", "mrz": [1, 2], "printed": "A B"})
    assert fields == {"name": "A B"} and evidence.mrz is None and evidence.printed == {}
    _, evidence = split_answer({"mrz": ["p<uto ERIKSSON", ""], "printed": {"id_number": "l 898-902"}})
    assert evidence.mrz == ("P<UTOERIKSSON",) and evidence.printed == {"name": None, "id_number": "L898902"}


def test_a_users_embedded_table_older_than_a_class_is_capped_there_and_says_so_once(tmp_path: Path, caplog,
                                                                                     monkeypatch) -> None:
    """A user's table for the embedded reader's key that lacks a class the shipped table measures (fitted before the
    reader named that evidence) caps the field as unseen, and the run is told once per class which table to fit
    again; a class neither table knows, and a model's table, warn nothing."""
    import logging

    from pipeline.trust import table as tables_module

    monkeypatch.setattr(tables_module, "_warned", set())  # once per process: this test may not be the first
    confirmed, old = "id_number/mrz.number_passed_confirmed", "id_number/mrz.number_passed"
    assert confirmed in shipped().curves
    Tables(tmp_path).save(ocr_key(), table({old: True}))
    ocr = Extraction(ref=DocumentRef(Path("/x.jpg"), "x.jpg", "0" * 64), fields={"doc_type": "passport"},
                     backend="ocr", model=ocr_key().model,
                     field_states={"id_number": FieldReading("L898902C3", "present", 1.0),
                                   "name": FieldReading("ERIKSSON ANNA", "present", 1.0)},
                     evidence={"id_number": confirmed, "name": "name/no.such_class"})
    scorer = Scorer.for_key(ocr_key(), tmp_path)
    with caplog.at_level(logging.WARNING, logger="pipeline.trust.table"):
        scored = [scorer(ocr) for _ in range(3)]
    assert scored[0].field_states["id_number"].confidence <= scorer.table.unseen_cap < 0.95
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and confirmed in warnings[0] and "idflow calibrate" in warnings[0], warnings
    assert scorer.table.table_id in warnings[0] and "no.such_class" not in warnings[0]
    caplog.clear()
    Tables(tmp_path).save(KEY, table({"id_number/mrz.number_passed/nolp": True}))
    with caplog.at_level(logging.WARNING, logger="pipeline.trust.table"):
        Scorer.for_key(KEY, tmp_path)(extraction(id_number=FieldReading("L898902C3", "present", 1.0)))
        Scorer.for_key(ocr_key(), tmp_path / "none")(ocr)  # the shipped table itself
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]
    # a model's floor taken from that older table: the floor's class is named too
    expiry = "expiry_date/mrz.expiry_passed"
    answer = dataclasses.replace(extraction(expiry_date=FieldReading("2031-02-02", "present", 1.0)),
                                 embedded={"expiry_date": (expiry, 1.0)})
    with caplog.at_level(logging.WARNING, logger="pipeline.trust.table"):
        floored_answer = Scorer.for_key(KEY, tmp_path)(answer)
    assert floored_answer.field_states["expiry_date"].confidence < 0.95
    assert [expiry in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [True]
