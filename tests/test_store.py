"""Parquet outputs: explicit types, atomic parts, idempotency index, readable with pandas."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.datamodel import DocumentRef, Extraction, Failure, FieldReading, PreparedImage, Reason, Record
from pipeline.store import (
    FAILURES,
    RESULT_SCHEMA,
    RESULTS,
    RunWriter,
    done_keys,
    read_table,
)


def _record(i: int) -> Record:
    ref = DocumentRef(path=Path(f"{i}.png"), rel_path=f"{i}.png", sha256=f"{i:064d}")
    prepared = PreparedImage(ref=ref, pixels=np.zeros((32, 64, 3), np.uint8), original_size=(640, 320),
                             sent_size=(64, 32), rotation_applied=90, skew_corrected=1.5,
                             orientation="landscape", visual_tokens=2)
    extraction = Extraction(ref=ref, fields={"doc_type": "passport", "name": "MARTIN SARAH", "id_number": "ZE000509",
                                             "expiry_date": "2023-01-14", "orientation": "landscape"},
                            backend="ocr", model="m", checks=["mrz.number"], rotation_correction=180,
                            field_states={"name": FieldReading("MARTIN SARAH", "present", 0.9)})
    return Record(extraction=extraction, prepared=prepared, checks=["schema", "mrz.number"],
                  expiry_date="2023-01-14", expiry_long_term=False)


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


def test_read_one_run(tmp_path: Path) -> None:
    for run in ("a", "b"):
        writer = RunWriter(tmp_path, run, "fp")
        writer.add(_record(1))
        writer.flush()
    assert read_table(tmp_path, RESULTS).num_rows == 2
    assert read_table(tmp_path, RESULTS, run_id="b").num_rows == 1
