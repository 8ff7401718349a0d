"""Confidence is decided once, after validation, for every backend (`pipeline.trust.table.Trust`): backends return
raw scores and the key of the table that measures them; the validate stage scores what validation kept; the hybrid
backend's reconciled reading is scored like any other."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Extraction, FieldReading, PreparedImage, Record
from pipeline.extract.hybrid import reconcile
from pipeline.formats.registered import FORMATS
from pipeline.run.engine import finish
from pipeline.trust.fit import fit
from pipeline.trust.key import TableKey
from pipeline.trust.rules import DISAGREEMENT_CAP, VS_OCR
from pipeline.trust.table import Tables, Trust, field_class, shipped
from tests.support.chat_server import VALID_ANSWER

REF = DocumentRef(path=Path("x.png"), rel_path="x.png", sha256="0" * 64)
PAGE = PreparedImage(ref=REF, pixels=np.zeros((32, 64, 3), np.uint8), original_size=(64, 32), sent_size=(64, 32),
                     rotation_applied=0, skew_corrected=0.0, orientation="landscape", visual_tokens=2)
VLM_KEY = TableKey("openai", "new-model-id", "extract_v3.en")
ZONE = ["mrz.number", "mrz.expiry", "cross.name_mrz_vs_viz"]  # the zone's digits pass; the print confirms the name
RAW = {"name": 0.97, "id_number": 0.99, "expiry_date": 0.995}


def ocr_reading(fields: dict | None = None, **states: FieldReading) -> Extraction:
    fields = dict(fields or VALID_ANSWER)
    present = {k: FieldReading(fields[k], "present", RAW[k]) for k in FIELD_NAMES if fields.get(k) is not None}
    return Extraction(ref=REF, fields=fields, backend="ocr", model="m", field_states={**present, **states},
                      checks=list(ZONE))


def answer(**changed: str | None) -> Extraction:
    fields = {**VALID_ANSWER, **changed}
    states = {k: FieldReading(fields[k], "present", 1.0) if fields[k] is not None else FieldReading.absent()
              for k in FIELD_NAMES}
    return Extraction(ref=REF, fields=fields, backend="openai", model="new-model-id", field_states=states,
                      evidence={k: f"{k}/printed/nolp" for k in FIELD_NAMES if fields[k] is not None},
                      table_key=VLM_KEY)


def embedded_confidence(name: str) -> float:
    """What the shipped embedded table gives the OCR reading's field."""
    ocr = ocr_reading()
    return shipped().confidence(field_class(ocr, name), RAW[name])


def test_each_reading_is_scored_by_the_table_of_its_key(tmp_path: Path) -> None:
    trust = Trust(tmp_path)
    ocr = trust(ocr_reading())
    assert ocr.calibration == shipped().table_id  # no key: the embedded OCR's table
    assert ocr.field_states["id_number"].confidence == embedded_confidence("id_number")
    vlm = trust(answer())
    assert vlm.calibration is None and all(vlm.field_states[k].confidence is None for k in FIELD_NAMES)
    assert Trust(tmp_path, raw=True)(answer()) == answer()


def trusting_table(tmp_path: Path, n: int) -> None:
    """A table for the model that has seen its every answer right `n` times."""
    obs = [{"class": f"{k}/printed/nolp", "raw": 1.0, "correct": True, "manifest": "t"}
           for k in FIELD_NAMES for _ in range(n)]
    Tables(tmp_path).save(VLM_KEY, fit(obs))


def test_a_table_file_is_read_once_per_key(tmp_path: Path) -> None:
    trust = Trust(tmp_path)
    trusting_table(tmp_path, 400)
    first = trust(answer())
    Tables(tmp_path).path_for(VLM_KEY).unlink()  # a run scores with the table it found, whatever happens later
    assert trust(answer()) == first and first.field_states["name"].confidence >= 0.95
    assert Trust(tmp_path)(answer()).field_states["name"].confidence is None


def test_confidence_is_decided_after_validation_on_what_it_kept() -> None:
    """A number its check digit refutes is stored unreadable and never scored; the other fields are scored by the
    embedded table as they were read."""
    refuted = next(check for check, name in FORMATS.refuting_checks().items() if name == "id_number")
    reading = ocr_reading()
    reading.checks.remove(refuted)
    reading.check_failures.append(refuted)
    record = finish(reading, PAGE, Trust(None))
    assert isinstance(record, Record)
    states = record.extraction.field_states
    assert states["id_number"] == FieldReading(None, "unreadable", 0.0)
    assert states["expiry_date"].confidence == embedded_confidence("expiry_date")
    assert record.extraction.calibration == shipped().table_id
    assert reading.field_states["name"].confidence == RAW["name"]  # the backend's reading itself stays raw


def test_hybrid_agreement_gets_at_least_the_embedded_confidence_with_no_table_for_the_model(tmp_path: Path) -> None:
    scored = Trust(tmp_path)(reconcile(ocr_reading(), answer()))
    assert "cross.ocr_vs_vlm" in scored.checks
    for name in FIELD_NAMES:
        assert scored.field_states[name].confidence == embedded_confidence(name), name


def test_hybrid_clash_keeps_the_ocr_value_and_is_never_auto_accepted_whatever_the_model_table(tmp_path: Path) -> None:
    trusting_table(tmp_path, 2000)  # a table that trusts the model's every answer
    reconciled = reconcile(ocr_reading(), answer(id_number="E12345679"))
    assert VS_OCR["id_number"] in reconciled.check_failures and "cross.ocr_vs_vlm" in reconciled.check_failures
    scored = Trust(tmp_path)(reconciled)
    assert scored.fields["id_number"] == VALID_ANSWER["id_number"]  # the OCR's checked value stays
    assert scored.field_states["id_number"].confidence <= DISAGREEMENT_CAP
    assert scored.field_states["name"].confidence >= max(embedded_confidence("name"), 0.95)  # agreement: the higher


def test_hybrid_an_answer_where_the_ocr_read_no_value_is_a_disagreement(tmp_path: Path) -> None:
    ocr = ocr_reading({**VALID_ANSWER, "expiry_date": None}, expiry_date=FieldReading.absent())
    scored = Trust(tmp_path)(reconcile(ocr, answer()))
    assert scored.fields["expiry_date"] is None
    assert scored.field_states["expiry_date"] == FieldReading(None, "absent", DISAGREEMENT_CAP)


def test_a_raw_report_is_rescored_as_a_run_scores_it() -> None:
    """`idflow calibrate`'s in-sample report and `tools/fit_calibration.py --check` score stored raw readings:
    the same class and table as a run, the disagreement cap, an unreadable field counting 0 for the document."""
    from pipeline.ops.evaluation import EvalItem, ItemResult, rescored

    item = EvalItem(path=Path("x.png"), rel_path="x.png", page=0, truth={}, condition="clean")
    evidence = {"name": ("name/mrz.name_vs_printed_passed", 0.999), "id_number": ("id_number/mrz.number_passed", 1.0)}
    raw = ItemResult(item, {}, {}, [], 0.0, None, evidence,
                     {"name": "present", "id_number": "present", "expiry_date": "absent"}, ["name"])
    scored = rescored(raw, shipped())
    assert scored.evidence["name"][1] == DISAGREEMENT_CAP  # its sources disagree: whatever the table says
    assert scored.evidence["id_number"][1] == shipped().confidence("id_number/mrz.number_passed", 1.0)
    assert scored.confidence == DISAGREEMENT_CAP and scored.calibration == shipped().table_id
    unreadable = dataclasses.replace(raw, states={**raw.states, "expiry_date": "unreadable"}, disagreeing=[])
    assert rescored(unreadable, shipped()).confidence == 0.0
    agreeing = dataclasses.replace(raw, disagreeing=[])
    assert rescored(agreeing, shipped()).confidence > DISAGREEMENT_CAP
    contradicted = dataclasses.replace(raw, disagreeing=["expiry_date"])  # absent, where a source reads one
    assert rescored(contradicted, shipped()).confidence == DISAGREEMENT_CAP
