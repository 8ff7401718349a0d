"""Consistency across OUT: one document number read with two names or expiry dates flags both records, whatever
their confidence, until a person decides; the rule's edges (re-reads, other document types, missing values)."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from pipeline.datamodel import FIELD_NAMES
from pipeline.review.conflicts import CONFLICT_REASON, LISTED, Reading, find_conflicts, group_conflicts, run_conflicts
from pipeline.review.corrections import Correction, write_corrections
from pipeline.review.queue import build_queue
from pipeline.run.report import conflicts_line
from pipeline.store.parquet import RESULT_SCHEMA, RESULTS, write_part, write_run_summary

NUMBER = "UT4815926"
T0 = datetime(2026, 1, 5, 8, 0, tzinfo=timezone.utc)


def result(out: Path, path: str, run_id: str, *, name: str | None = "ERIKSSON ANNA", number: str | None = NUMBER,
           expiry: date | None = date(2031, 4, 15), doc_type: str = "passport", at: datetime = T0,
           sha: str | None = None, confidence: float = 0.99) -> str:
    """One stored result (confident unless told); returns its document key."""
    sha = sha or path.ljust(64, "0")[:64]
    row = {f.name: None for f in RESULT_SCHEMA} | {
        "source_path": path, "page": 0, "sha256": sha, "doc_type": doc_type, "name": name, "id_number": number,
        "expiry_date": expiry, "expiry_long_term": False, "fingerprint": "f", "run_id": run_id, "processed_at": at,
        "backend": "ocr", "model": "m", "checks": [], "check_failures": []}
    for field in FIELD_NAMES:
        row[f"{field}_state"], row[f"{field}_confidence"] = "present", confidence
    write_part(out, RESULTS, RESULT_SCHEMA, [row], run_id=f"{run_id}-{path}", run_date=at.date(), part=0)
    return f"{sha}:0"


def decide(out: Path, key: str, path: str, decision: str, **after: str | None) -> None:
    before = {"doc_type": "passport", "name": "ERIKSSON ANNA", "id_number": NUMBER, "expiry_date": "2031-04-15"}
    write_corrections(out, [Correction(key[:64], 0, path, "r1", "Ada", decision, before,  # type: ignore[arg-type]
                                       {**before, **after})])


def test_the_same_number_under_another_name_flags_both_records(tmp_path: Path) -> None:
    first = result(tmp_path, "a.jpg", "r1")
    second = result(tmp_path, "b.jpg", "r2", name="LARSSON EVA", at=T0 + timedelta(hours=1))
    conflicts = find_conflicts(tmp_path)
    assert set(conflicts) == {first, second}
    assert conflicts[second].fields == ("name",)
    assert "a.jpg" in conflicts[second].detail() and "ERIKSSON ANNA" in conflicts[second].detail()
    assert run_conflicts(tmp_path, {"r2"}) == {"records": 1, "other_records": 1, "numbers": ["UT*****26"]}


def test_another_expiry_date_is_a_conflict_and_a_missing_one_is_not(tmp_path: Path) -> None:
    first = result(tmp_path, "a.jpg", "r1")
    result(tmp_path, "b.jpg", "r1", expiry=None)  # nothing to compare: no conflict
    third = result(tmp_path, "c.jpg", "r1", expiry=date(2031, 5, 14))
    conflicts = find_conflicts(tmp_path)
    assert set(conflicts) == {first, third} and conflicts[third].fields == ("expiry_date",)


def test_same_values_written_differently_other_types_and_re_reads_are_no_conflict(tmp_path: Path) -> None:
    result(tmp_path, "a.jpg", "r1", name="ERIKSSON ANNA")
    result(tmp_path, "b.jpg", "r1", name="eriksson  anna", number="ut 4815926")  # case and spaces only
    result(tmp_path, "c.jpg", "r1", name="ZHANG WEI", doc_type="visa")  # another document type
    result(tmp_path, "d.jpg", "r1", name="NOBODY", number="E00000001")  # another number
    # the same document read again by a later run: its latest reading is all that counts
    result(tmp_path, "e.jpg", "r1", name="ERIKSON ANNA", sha="e" * 64)
    result(tmp_path, "e.jpg", "r2", name="ERIKSSON ANNA", sha="e" * 64, at=T0 + timedelta(days=1))
    assert find_conflicts(tmp_path) == {}
    assert run_conflicts(tmp_path, {"r2"}) == {"records": 0, "other_records": 0, "numbers": []}


def test_a_person_correcting_one_side_resolves_the_conflict(tmp_path: Path) -> None:
    result(tmp_path, "a.jpg", "r1")
    second = result(tmp_path, "b.jpg", "r2", name="ERIKSSON ANMA")
    assert len(find_conflicts(tmp_path)) == 2
    decide(tmp_path, second, "b.jpg", "corrected", name="ERIKSSON ANNA")
    assert find_conflicts(tmp_path) == {}


def test_a_person_confirming_one_side_leaves_the_other_flagged_until_it_is_decided_too(tmp_path: Path) -> None:
    first = result(tmp_path, "a.jpg", "r1")
    second = result(tmp_path, "b.jpg", "r2", name="LARSSON EVA")
    decide(tmp_path, second, "b.jpg", "confirmed", name="LARSSON EVA")  # the person says b really reads so
    conflicts = find_conflicts(tmp_path)
    assert set(conflicts) == {first}  # a decided document is final, never flagged
    assert conflicts[first].disagreements[0].other.by_person
    decide(tmp_path, first, "a.jpg", "confirmed")  # both looked at: the number is used twice
    assert find_conflicts(tmp_path) == {}


def test_a_corrected_failure_can_flag_a_machine_record(tmp_path: Path) -> None:
    """A document that only failed and that a person filled in has no result row; its number still counts."""
    first = result(tmp_path, "a.jpg", "r1")
    decide(tmp_path, "f" * 64 + ":0", "f.jpg", "corrected", name="LARSSON EVA")
    assert set(find_conflicts(tmp_path)) == {first}


@pytest.mark.parametrize("whole_out", [False, True])
def test_both_records_are_in_the_queue_whatever_their_confidence(tmp_path: Path, whole_out: bool) -> None:
    result(tmp_path, "a.jpg", "r1")
    write_run_summary(tmp_path, {"run_id": "r1", "input_dir": str(tmp_path), "accounted": True})
    result(tmp_path, "b.jpg", "r2", name="LARSSON EVA", at=T0 + timedelta(hours=1))
    result(tmp_path, "c.jpg", "r2", number="E00000001")  # confident, no conflict: auto-accepted
    write_run_summary(tmp_path, {"run_id": "r2", "input_dir": str(tmp_path), "accounted": True})
    queue = build_queue(tmp_path, None if whole_out else "r2", threshold=0.95, thumbnails=False,
                        whole_out=whole_out)
    assert {(i.source_path, i.reason, i.kind) for i in queue.open_items} == {
        ("a.jpg", CONFLICT_REASON, "conflict"), ("b.jpg", CONFLICT_REASON, "conflict")}
    assert [i.source_path for i in queue.items] == ["a.jpg", "b.jpg"]  # side by side
    assert all(i.confidence == pytest.approx(0.99) for i in queue.items)


def test_the_summary_line_holds_masked_numbers_only(tmp_path: Path) -> None:
    result(tmp_path, "a.jpg", "r1")
    result(tmp_path, "b.jpg", "r2", name="LARSSON EVA")
    summary = {"number_conflicts": run_conflicts(tmp_path, {"r2"})}
    line = conflicts_line(summary)
    assert line is not None and "1 of this run's records and 1 of other runs" in line and "UT*****26" in line
    assert NUMBER not in line and NUMBER not in json.dumps(summary)
    assert conflicts_line({"number_conflicts": {"records": 0}}) is None and conflicts_line({}) is None


def test_the_prefect_form_says_which_fields_disagree_never_their_values(tmp_path: Path) -> None:
    from flows.review import _describe

    result(tmp_path, "a.jpg", "r1")
    result(tmp_path, "b.jpg", "r2", name="LARSSON EVA")
    write_run_summary(tmp_path, {"run_id": "r2", "input_dir": str(tmp_path), "accounted": True})
    item = next(i for i in build_queue(tmp_path, "r2", thumbnails=False).items if i.source_path == "b.jpg")
    text = _describe(item, tmp_path / "page.html", 1, 2, [], item.machine_values())
    assert "number_conflict" in text and "the same number is on 1 other document(s) with another name" in text
    assert NUMBER not in text and "ERIKSSON" not in text and "LARSSON" not in text


def _reading(i: int, name: str, expiry: str | None = "2031-01-01") -> Reading:
    return Reading(key=f"{i:064d}:0", source_path=f"scan{i}.jpg", run_id="r", doc_type="passport",
                   id_number="UT4815926", name=name, expiry=expiry, by_person=False)


def test_a_group_that_agrees_flags_nothing_however_large() -> None:
    assert group_conflicts([_reading(i, "LARSSON EVA") for i in range(3000)]) == {}


def test_one_disagreeing_reading_flags_every_record_and_lists_at_most_listed() -> None:
    readings = [_reading(i, "LARSSON EVA") for i in range(300)] + [_reading(300, "LARSSON EVE", "2032-01-01")]
    conflicts = group_conflicts(readings)
    assert len(conflicts) == 301  # every record disagrees with the odd one, and it with all of them
    odd = conflicts[readings[-1].key]
    assert len(odd.disagreements) == LISTED and all(d.fields == ("name", "expiry_date") for d in odd.disagreements)
    assert [d.other.key for d in conflicts[readings[0].key].disagreements] == [readings[-1].key]
