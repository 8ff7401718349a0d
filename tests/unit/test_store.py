"""Parquet outputs: explicit types, atomic parts, idempotency index, readable with pandas; any file name, a bad
row costs one document, a write error loses nothing already done."""

from __future__ import annotations

import dataclasses
from datetime import date
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.datamodel import DocumentRef, Failure, Reason, Record
from pipeline.store.parquet import (
    FAILURES,
    RESULT_SCHEMA,
    RESULTS,
    OutputUnreadable,
    RunWriter,
    StoreWriteError,
    done_keys,
    read_table,
    source_file_name,
)
from tests.support.records import passport_record


def _record(i: int) -> Record:
    """An expired passport's record, turned 90 degrees by prepare and 180 more by the backend, a zone check passed."""
    record = passport_record(i, expiry="2023-01-14")
    prepared = dataclasses.replace(record.prepared, rotation_applied=90, skew_corrected=1.5)
    extraction = dataclasses.replace(record.extraction, checks=["mrz.number"], rotation_correction=180)
    return dataclasses.replace(record, extraction=extraction, prepared=prepared, checks=["schema", "mrz.number"])


def test_rows_are_typed_and_parts_atomic(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1", flush_every=2)
    for i in range(3):
        writer.add(_record(i))
    writer.add(Failure("bad.jpg", None, None, "ingest", Reason.UNSUPPORTED_TYPE, "text file"))
    writer.flush()
    # 3 results + 1 failure with flush_every=2 -> part 0 (2 results), part 1 (1 result, 1 failure)
    assert len(writer.written) == 3
    assert not list(tmp_path.rglob(".*.tmp"))

    df = pd.read_parquet(tmp_path / RESULTS)
    assert len(df) == 3
    assert df["expiry_date"].iloc[0] == date(2023, 1, 14)
    assert df["rotation_applied"].iloc[0] == 270  # 90 from prepare + 180 found by the backend
    assert list(df["checks"].iloc[0]) == ["schema", "mrz.number"]
    assert df["name_state"].iloc[0] == "present" and df["id_number_state"].iloc[0] == "present"
    table = read_table(tmp_path, RESULTS)
    assert table.schema.field("expiry_date").type == pa.date32()
    assert set(RESULT_SCHEMA.names) <= set(table.schema.names)
    failures = read_table(tmp_path, FAILURES).to_pylist()
    assert failures[0]["reason"] == "unsupported_type" and failures[0]["retryable"] is False


def test_done_keys_depend_on_fingerprint(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1")
    writer.add(_record(7))
    writer.flush()
    assert done_keys(tmp_path, "fp1") == {f"{7:064d}:0"}
    assert done_keys(tmp_path, "other") == set()
    assert done_keys(tmp_path / "nothing-yet", "fp1") == set()


def test_a_damaged_part_is_named_not_a_traceback(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1", flush_every=1)
    writer.add(_record(0))
    writer.flush()
    [part] = writer.written
    part.write_bytes(part.read_bytes()[:40])  # damaged from outside (a copy cut short, a bad disk)
    with pytest.raises(OutputUnreadable, match="cannot be read") as caught:
        done_keys(tmp_path, "fp1")
    assert str(tmp_path / RESULTS) in str(caught.value) and "\n" not in str(caught.value)


def test_read_one_run(tmp_path: Path) -> None:
    for run in ("a", "b"):
        writer = RunWriter(tmp_path, run, "fp")
        writer.add(_record(1))
        writer.flush()
    assert read_table(tmp_path, RESULTS).num_rows == 2
    assert read_table(tmp_path, RESULTS, run_id="b").num_rows == 1


ODD_NAMES = ["caf\udce9-latin1.png", "two\nlines.png", 'quote"d \'name\'.png', "tab\there.png", "[red]markup[/].png",
             "身份证.png"]


def _named(i: int, rel: str) -> Record:
    record = _record(i)
    ref = DocumentRef(path=Path(rel), rel_path=rel, sha256=f"{i:064d}")
    return dataclasses.replace(record, extraction=dataclasses.replace(record.extraction, ref=ref))


def test_any_file_name_is_stored_readable_and_exact(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1")
    for i, rel in enumerate(ODD_NAMES):
        writer.add(_named(i, rel))
        writer.add(Failure(rel, None, None, "ingest", Reason.UNREADABLE, f"cannot read {rel}"))
    writer.flush()
    assert writer.demoted == []
    for name in (RESULTS, FAILURES):
        rows = read_table(tmp_path, name).to_pylist()
        assert sorted(source_file_name(r) for r in rows) == sorted(ODD_NAMES)  # lossless
        readable = {r["source_path"] for r in rows}
        assert "caf\\xe9-latin1.png" in readable and "two\nlines.png" in readable and "身份证.png" in readable
    details = {r["detail"] for r in read_table(tmp_path, FAILURES).to_pylist()}
    assert "cannot read caf\\udce9-latin1.png" in details  # any text with such a name is escaped, not fatal


def test_a_row_that_cannot_be_converted_costs_one_document(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1", flush_every=4)
    bad = _record(1)
    bad.extraction.fields["name"] = {"family": "MARTIN"}  # a value of the wrong type from some backend
    huge = _record(2)
    huge.extraction.prompt_tokens = 2**40  # out of the column's range
    for outcome in (_record(0), bad, huge, _record(3)):
        writer.add(outcome)
    writer.flush()
    results = read_table(tmp_path, RESULTS).to_pylist()
    assert sorted(r["sha256"] for r in results) == [f"{0:064d}", f"{3:064d}"]
    failures = read_table(tmp_path, FAILURES).to_pylist()
    assert sorted(r["sha256"] for r in failures) == [f"{1:064d}", f"{2:064d}"]
    assert {r["reason"] for r in failures} == {"internal_error"} and all("stored" in r["detail"] for r in failures)
    assert sorted(f.sha256 for f in writer.demoted) == [f"{1:064d}", f"{2:064d}"]


def test_a_result_whose_row_cannot_be_built_becomes_a_failure(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1")
    broken = dataclasses.replace(_record(5), expiry_date="14/01/2023")  # not ISO: the row cannot be built
    writer.add(broken)
    writer.flush()
    assert read_table(tmp_path, RESULTS) is None
    (row,) = read_table(tmp_path, FAILURES).to_pylist()
    assert row["reason"] == "internal_error" and row["sha256"] == f"{5:064d}"


def test_a_write_error_keeps_the_rows_and_what_was_written(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, "run1", "fp1", flush_every=2)
    writer.add(_record(0))
    writer.add(_record(1))  # part 0 written
    writer.run_date = date(2031, 1, 1)
    blocked = tmp_path / RESULTS / "run_date=2031-01-01"
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("a file where the partition folder goes")  # the OS refuses: not a directory
    writer.add(_record(2))
    with pytest.raises(StoreWriteError, match="could not write 2 results rows"):
        writer.add(_record(3))
    assert len(writer.written) == 1 and pq.read_metadata(writer.written[0]).num_rows == 2  # earlier part intact
    assert not list(tmp_path.rglob("*.tmp"))
    blocked.unlink()
    writer.flush()  # the buffered rows are still there
    keys = sorted(read_table(tmp_path, RESULTS).column("sha256").to_pylist())
    assert keys == [f"{i:064d}" for i in range(4)]


def test_temp_names_are_unique_per_writer(tmp_path: Path) -> None:
    seen: set[str] = set()
    original = pq.write_table

    def record_tmp(table, where, *args, **kwargs):
        seen.add(Path(where).name)
        return original(table, where, *args, **kwargs)

    pq.write_table = record_tmp
    try:
        for _ in range(2):  # two writers of one run id (the worst case) write part 0 each
            writer = RunWriter(tmp_path, "same-run", "fp")
            writer.add(_record(1))
            writer.flush()
    finally:
        pq.write_table = original
    assert len(seen) == 2
