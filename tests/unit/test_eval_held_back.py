"""`idflow eval` says what holds documents back: per evidence class, how many fields reach the threshold, how
precise those are, and how many documents that class alone keeps from being auto-accepted; per capture condition,
the share auto-accepted and its precision."""

from __future__ import annotations

from pathlib import Path

from pipeline.datamodel import FIELD_NAMES
from pipeline.ops.evaluation import EvalItem, EvalReport, ItemResult


def _result(condition: str, evidence: dict[str, tuple[str, float]], wrong: tuple[str, ...] = ()) -> ItemResult:
    item = EvalItem(Path("p.png"), "p.png", 0, dict.fromkeys(FIELD_NAMES, "x"), condition)
    correct = {k: k not in wrong for k in FIELD_NAMES}
    return ItemResult(item, dict.fromkeys(FIELD_NAMES, "x"), correct, [], min(c for _, c in evidence.values()),
                      None, evidence, dict.fromkeys(evidence, "present"))


SURE = {"id_number": ("id_number/mrz.number_passed", 0.99), "expiry_date": ("expiry_date/mrz.expiry_passed", 0.99)}


def test_a_class_below_the_threshold_holds_back_the_documents_only_it_keeps_from_acceptance() -> None:
    report = EvalReport([
        _result("scan", {"name": ("name/mrz.name_vs_printed_none", 0.6), **SURE}),
        _result("scan", {"name": ("name/mrz.name_vs_printed_none", 0.6), **SURE}, wrong=("name",)),
        _result("photo", {"name": ("name/mrz.name_vs_printed_passed", 0.98), **SURE}),
        _result("photo", {"name": ("name/mrz.name_vs_printed_none", 0.6),
                          "id_number": ("id_number/printed", 0.5), "expiry_date": SURE["expiry_date"]}),
    ])
    classes = report.per_evidence_class(0.95)
    none = classes["name/mrz.name_vs_printed_none"]
    assert (none["fields"], none["right"], none["passing"], none["holds_back"]) == (3, 2, 0, 2)
    assert none["precision"] is None  # nothing reaches the threshold: no precision to state
    assert classes["id_number/printed"]["holds_back"] == 0  # the name is below the threshold too
    assert classes["id_number/mrz.number_passed"] == {"fields": 3, "right": 3, "passing": 3, "passing_right": 3,
                                                      "holds_back": 0, "precision": 1.0}
    conditions = report.per_condition_at(0.95)
    assert conditions["photo"] == {"documents": 2, "accepted": 1, "share": 0.5, "precision": 1.0}
    assert conditions["scan"]["accepted"] == 0


def test_the_report_carries_both_views_at_the_threshold_it_states() -> None:
    report = EvalReport([_result("scan", {"name": ("name/mrz.name_vs_printed_passed", 0.9), **SURE})])
    data = report.as_dict(threshold=0.85)
    assert data["per_evidence_class"]["name/mrz.name_vs_printed_passed"]["passing"] == 1
    assert data["per_condition_at_threshold"]["scan"]["accepted"] == 1
    assert report.as_dict(threshold=0.95)["per_evidence_class"]["name/mrz.name_vs_printed_passed"]["holds_back"] == 1
