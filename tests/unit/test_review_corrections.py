"""Corrections (plain functions, real Parquet): the same validation as machine output, atomic parts, the
merged view `final_records`, and the retry leaving a document a person decided on alone."""

from __future__ import annotations

import dataclasses
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

from pipeline.review.corrections import (
    CORRECTIONS,
    Correction,
    clean_values,
    corrected_keys,
    correction_problems,
    decide,
    final_records,
    latest_corrections,
    not_to_read_again,
    write_corrections,
)
from pipeline.review.failure_queue import open_entries
from pipeline.store.parquet import RESULT_SCHEMA, RESULTS, write_part
from tests.unit.test_failure_queue import FakeBackend, queue, retry  # noqa: F401  (queue is a fixture)

NUMBER = "110101199003071233"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def _correction(sha: str, decision: str = "corrected", who: str = "Ada", **after: str | None) -> Correction:
    values = clean_values({"doc_type": "cn_id", "name": "张伟", "id_number": NUMBER, "expiry_date": None, **after})
    before = dict.fromkeys(values)
    return Correction(sha, 0, f"{sha[:4]}.jpg", "r1", who, decision, before, values)  # type: ignore[arg-type]


def test_a_wrong_check_digit_is_refused_with_the_reason_and_the_right_one_accepted() -> None:
    wrong = clean_values({"doc_type": "cn_id", "name": "张伟", "id_number": NUMBER[:-1] + "4", "expiry_date": ""})
    assert correction_problems(wrong, "landscape") == [
        "cn_id.checksum: MOD 11-2 check character or embedded birth date is wrong"]
    right = clean_values({"doc_type": "cn_id", "name": " 张伟 ", "id_number": "1101 0119 9003 0712 33"})
    assert right == {"doc_type": "cn_id", "name": "张伟", "id_number": NUMBER, "expiry_date": None}
    assert correction_problems(right, None) == []
    assert correction_problems({**right, "expiry_date": "2031-02-30"}, "portrait") == [
        "date.expiry: '2031-02-30' is not a calendar date"]
    assert correction_problems({**right, "doc_type": "library_card"}, "landscape")  # schema enum
    lower_x = clean_values({"doc_type": "cn_id", "name": "李娜", "id_number": "11010519491231002x"})
    assert lower_x["id_number"].endswith("X") and correction_problems(lower_x, "landscape") == []
    abbreviated = clean_values({"doc_type": "passport", "name": "ST. JOHN MARY", "id_number": "X1234567"})
    assert correction_problems(abbreviated, "landscape") == []  # as printed: the person's answer is final


def test_confirmed_when_nothing_changed() -> None:
    values = {"doc_type": "passport", "name": "A B", "id_number": "X123456", "expiry_date": "2030-01-01"}
    assert decide(values, dict(values)) == "confirmed"
    assert decide(values, {**values, "name": "A C"}) == "corrected"


def test_each_save_is_its_own_atomic_part_and_the_latest_wins(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = write_corrections(out, [_correction("a" * 64, name="张")], when=T0)
    second = write_corrections(out, [_correction("a" * 64, who="Bo")], when=T0 + timedelta(minutes=5))
    assert first != second and first.parent.parent.name == CORRECTIONS
    assert not [p for p in (out / CORRECTIONS).rglob("*") if p.name.startswith(".")]  # no temp files left
    assert write_corrections(out, []) is None
    latest = latest_corrections(out)
    assert list(latest) == ["a" * 64 + ":0"] and latest["a" * 64 + ":0"]["who"] == "Bo"
    assert corrected_keys(out) == {"a" * 64 + ":0"}


def test_final_records_prefer_the_person(tmp_path: Path) -> None:
    out = tmp_path / "out"
    machine = [{field.name: None for field in RESULT_SCHEMA} | {
        "source_path": f"{c}.jpg", "page": 0, "sha256": c * 64, "doc_type": "cn_id", "name": "王", "id_number": NUMBER,
        "expiry_date": date(2030, 1, 1), "expiry_long_term": False, "fingerprint": "f", "run_id": "r1",
        "processed_at": T0} for c in "abc"]
    write_part(out, RESULTS, RESULT_SCHEMA, machine, run_id="r1", run_date=T0.date(), part=0)
    write_corrections(out, [_correction("a" * 64, expiry_date="long-term"),
                            _correction("b" * 64, decision="cannot be read"),
                            _correction("d" * 64, expiry_date="2031-05-06")], when=T0)  # d: only ever failed
    rows = {r["sha256"][0]: r for r in final_records(out).to_pylist()}
    assert set(rows) == {"a", "b", "c", "d"}
    assert (rows["a"]["decided_by"], rows["a"]["name"], rows["a"]["expiry_long_term"]) == ("person", "张伟", True)
    assert rows["b"]["decision"] == "cannot be read" and rows["b"]["name"] is None and rows["b"]["id_number"] is None
    assert (rows["c"]["decided_by"], rows["c"]["name"], rows["c"]["who"]) == ("machine", "王", None)
    assert rows["d"]["expiry_date"] == date(2031, 5, 6) and rows["d"]["run_id"] == "r1"


def test_a_later_machine_reading_does_not_override_a_correction(tmp_path: Path) -> None:
    """Values a person corrected are final: a machine result written after the correction (another run, other
    settings, its reading sure of itself) neither replaces the person's values in the merged view nor makes the
    document one to read again."""
    out = tmp_path / "out"
    sha = "e" * 64
    write_corrections(out, [_correction(sha, name="张伟")], when=T0)
    later = {field.name: None for field in RESULT_SCHEMA} | {
        "source_path": "e.jpg", "page": 0, "sha256": sha, "doc_type": "cn_id", "name": "张纬", "id_number": NUMBER,
        "expiry_date": date(2030, 1, 1), "expiry_long_term": False, "fingerprint": "new-settings", "run_id": "r9",
        "processed_at": T0 + timedelta(days=3)}
    write_part(out, RESULTS, RESULT_SCHEMA, [later], run_id="r9", run_date=(T0 + timedelta(days=3)).date(), part=0)
    [row] = final_records(out).to_pylist()
    assert (row["decided_by"], row["name"], row["who"]) == ("person", "张伟", "Ada")
    assert f"{sha}:0" in not_to_read_again(out, "yet-other-settings")
    assert f"{sha}:0" in not_to_read_again(out, None)


def test_the_retry_leaves_a_corrected_document_alone(queue: tuple[Path, Path]) -> None:  # noqa: F811
    inbox, out = queue
    entries, _ = open_entries(out)
    retryable = next(e for e in entries if e.retryable)
    write_corrections(out, [Correction(retryable.sha256, 0, retryable.source_path, "r1", "Ada", "cannot be read",
                                       dict.fromkeys(("doc_type", "name", "id_number", "expiry_date")),
                                       dict.fromkeys(("doc_type", "name", "id_number", "expiry_date")))])
    assert [e.source_path for e in open_entries(out)[0]] == ["b.png"]
    backend = FakeBackend()
    assert retry(out, backend, "r2").resolved == 0 and backend.calls == 0


def test_show_lists_corrections_masked_and_as_text(tmp_path: Path) -> None:
    """`idflow show`'s table of decisions: a number inside a file name is masked as everywhere on the console, and
    names a person or a file chose ('ops [/team]', 'x[/b].jpg') are text, not markup (rich raised on them)."""
    from idflow.common import console
    from idflow.review import print_corrections

    corr = dataclasses.replace(_correction("a" * 64, who="ops [/team]", name="ZHANG SAN"),
                               source_path="x[/b]/zhang110101199003071233.jpg")
    write_corrections(tmp_path, [corr])
    width, console.width = console.width, 400  # one line a row: nothing folded across lines
    try:
        with console.capture() as captured:
            print_corrections(tmp_path)
    finally:
        console.width = width
    shown = captured.get()
    assert "110101199003071233" not in shown and "zhang1101" in shown
    assert "ops [/team]" in shown and "x[/b]/" in shown
