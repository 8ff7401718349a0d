"""Calibrated confidence: evidence classes, the isotonic fit, the shipped table and the precision/coverage
report."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef, Extraction, FieldReading
from pipeline.ops.evaluation import EvalItem, EvalReport, ItemResult
from pipeline.trust import fit as fit_calibration
from pipeline.trust.table import Calibration, evidence_class, shipped


def test_evidence_classes_follow_the_checks():
    mrz_ok = ["mrz.number", "mrz.expiry", "cross.name_mrz_vs_viz"]
    assert evidence_class("id_number", "passport", mrz_ok, []) == "id_number/mrz.number_passed"
    # a number the printed zone shows alike is a class of its own; one the print contradicts or lacks is not
    assert evidence_class("id_number", "passport", mrz_ok + ["cross.number_mrz_vs_viz"], []) == \
        "id_number/mrz.number_passed_confirmed"
    assert evidence_class("id_number", "passport", mrz_ok, ["cross.number_mrz_vs_viz"]) == "id_number/mrz.number_passed"
    assert evidence_class("id_number", "passport", ["cross.number_mrz_vs_viz"], ["mrz.number"]) == \
        "id_number/mrz.number_failed"
    assert evidence_class("name", "passport", mrz_ok, []) == "name/mrz.name_vs_printed_passed"
    assert evidence_class("name", "passport", ["mrz.number"], ["cross.name_mrz_vs_viz"]) == \
        "name/mrz.name_vs_printed_failed"
    assert evidence_class("expiry_date", "id_card", ["mrz.number"], ["mrz.expiry"]) == "expiry_date/mrz.expiry_failed"
    assert evidence_class("name", "unknown", [], []) == "name/printed"
    assert evidence_class("id_number", "cn_id", ["cn_id.checksum"], []) == "id_number/cn.passed"


def test_isotonic_pools_violators_and_is_monotone():
    points = [(0.1, False), (0.2, True), (0.3, False), (0.5, True), (0.6, True), (0.9, True), (0.95, False)]
    blocks = fit_calibration.isotonic(points)
    rates = [right / seen for _, right, seen in blocks]
    assert rates == sorted(rates)
    assert sum(seen for _, _, seen in blocks) == len(points)
    assert blocks[0][0] == 0.1


def test_fit_maps_each_step_to_the_lower_end_of_its_interval_and_states_it():
    obs = [{"class": "id_number/mrz.number_passed", "raw": 0.9 + i / 1000, "correct": True, "manifest": "t"}
           for i in range(48)]
    obs += [{"class": "name/printed", "raw": r, "correct": c, "manifest": "t"}
            for r, c in ((0.2, False), (0.3, False), (0.4, True), (0.45, True))]
    table = fit_calibration.fit(obs, key={"backend": "ocr", "model": "m", "prompt": None})
    cal = Calibration.from_dict(table)
    # 48 right of 48: the 95% Wilson interval starts at 0.9259 (never "certain", and below 0.95 on 48 pages)
    low = fit_calibration.wilson(48, 48)[0]
    assert low == pytest.approx(0.92590, abs=1e-5)
    mapped = cal.confidence("id_number/mrz.number_passed", 0.95)
    assert mapped == pytest.approx(low, abs=1e-4) and mapped <= low  # rounded down, never up
    stated = table["classes"]["id_number/mrz.number_passed"]
    assert (stated["observations"], stated["right_total"]) == (48, 48)
    assert stated["interval95"] == [round(low, 4), 1.0] and table["key"]["backend"] == "ocr"
    assert fit_calibration.wilson(73, 73)[0] >= 0.95 > fit_calibration.wilson(72, 72)[0]
    assert cal.confidence("name/printed", 0.25) < cal.confidence("name/printed", 0.44)
    assert cal.confidence("expiry_date/unheard_of", 0.99) == 0.9  # unseen class: capped


def test_apply_calibrates_present_fields_only():
    cal = Calibration.from_dict({"unseen_cap": 0.9, "classes": {
        "id_number/mrz.number_passed": {"edges": [0.0, 0.8], "values": [0.6, 0.998], "counts": [5, 500]}}})
    ref = DocumentRef(path=Path("x.jpg"), rel_path="x.jpg", sha256="0" * 64)
    ex = Extraction(ref=ref, fields={"doc_type": "passport", "id_number": "X1", "name": None, "expiry_date": None},
                    backend="ocr", model="m", checks=["mrz.number"],
                    field_states={"id_number": FieldReading("X1", "present", 0.85),
                                  "name": FieldReading(None, "unreadable", 0.0),
                                  "expiry_date": FieldReading.absent()})
    out = cal.apply(ex)
    assert out.field_states["id_number"].confidence == 0.998
    assert out.field_states["name"] == ex.field_states["name"]
    assert out.field_states["expiry_date"].confidence == 1.0


def test_shipped_table_is_monotone_and_bounded():
    table = shipped()
    assert table.curves, "the shipped table has no fitted classes"
    for name, curve in table.curves.items():
        assert list(curve.values) == sorted(curve.values), name
        assert all(0.0 <= v < 1.0 for v in curve.values), name
        assert list(curve.edges) == sorted(curve.edges), name


REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "pipeline" / "trust" / "calibration_table.json"
OBSERVATIONS = REPO / "data" / "calibration_observations.jsonl.gz"
THRESHOLD = 0.95  # the documented auto-accept threshold


def _field_observations() -> list[dict]:
    with gzip.open(OBSERVATIONS, "rt", encoding="utf-8") as f:
        rows = [json.loads(x) for x in f if x.strip()]
    return [o for o in rows if o.get("field") is not None]


def test_the_shipped_table_states_the_observations_it_was_fitted_on():
    """Each class's stated observations, right count and interval are those of the committed observations, and
    refitting them gives the shipped curves."""
    table = json.loads(SHIPPED.read_text(encoding="utf-8"))
    observations = _field_observations()
    seen = Counter(o["class"] for o in observations)
    right = Counter(o["class"] for o in observations if o["correct"])
    assert table["observations"] == len(observations)
    assert {k: c["observations"] for k, c in table["classes"].items()} == dict(seen)
    for name, c in table["classes"].items():
        assert sum(c["counts"]) == c["observations"] and sum(c["right"]) == c["right_total"] == right[name], name
        low, high = fit_calibration.wilson(right[name], seen[name])
        assert c["interval95"] == [round(low, 4), round(high, 4)], name
    refit = fit_calibration.fit(observations, key=table["key"], min_observations=table["min_observations"])
    assert refit["classes"] == table["classes"]
    assert table["min_observations"] == fit_calibration.SHIPPED_MIN_OBSERVATIONS


def test_every_class_that_passes_the_threshold_was_seen_300_times():
    table = json.loads(SHIPPED.read_text(encoding="utf-8"))
    passing = {k: c for k, c in table["classes"].items() if max(c["values"]) >= THRESHOLD}
    assert passing, "no class of the shipped table reaches the threshold"
    for name, c in passing.items():
        assert c["observations"] >= fit_calibration.SHIPPED_MIN_OBSERVATIONS and not c["capped"], name
    for name, c in table["classes"].items():
        if c["observations"] < fit_calibration.SHIPPED_MIN_OBSERVATIONS:
            assert c["capped"] and max(c["values"]) <= table["unseen_cap"] < THRESHOLD, name


def test_a_class_seen_too_few_times_stays_capped():
    obs = [{"class": "name/mrz.name_vs_printed_none", "raw": 0.9, "correct": True, "manifest": "t"}] * 120
    free = fit_calibration.fit(obs)["classes"]["name/mrz.name_vs_printed_none"]
    capped = fit_calibration.fit(obs, min_observations=300)["classes"]["name/mrz.name_vs_printed_none"]
    assert free["values"][-1] > THRESHOLD and not free["capped"]
    assert capped["values"][-1] == fit_calibration.UNSEEN_CAP and capped["capped"]
    assert capped["observations"] == 120 and capped["interval95"] == free["interval95"]


def _result(confidence: float, right: bool) -> ItemResult:
    item = EvalItem(path=Path("x"), rel_path="x", page=0, truth={}, condition="clean")
    return ItemResult(item, {}, {"name": right, "id_number": True, "expiry_date": True}, [], confidence, None)


def test_precision_coverage_curve_and_operating_point():
    results = [_result(0.999, True)] * 6 + [_result(0.99, True)] * 2 + [_result(0.9, False), _result(0.5, True)]
    report = EvalReport(results)
    curve = report.precision_coverage()
    assert curve[0] == (0.999, 0.6, 1.0)
    assert curve[1] == (0.99, 0.8, 1.0)
    assert curve[2][2] == pytest.approx(8 / 9)
    assert report.operating_point() == (0.99, 0.8, 1.0)
    assert EvalReport([_result(0.99, False)]).operating_point() is None
