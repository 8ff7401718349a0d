"""Parquet outputs: typed results, the failure queue, the idempotency index and per-run summaries.

Layout under OUT/: `results/run_date=YYYY-MM-DD/part-<run_id>-<n>.parquet`, the same for `failures/`, and
`runs/<run_id>.json`. Each part is written under a hidden temp name and renamed, so a crash never leaves a
half-written file that a reader would pick up; a run flushes every `flush_every` documents, so a killed run
loses at most that much work and never duplicates a row.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from pipeline.atomic import write_json_atomic
from pipeline.datamodel import FIELD_NAMES, Failure, Record, Skipped
from pipeline.masking import redact

RESULTS = "results"
FAILURES = "failures"
RUNS = "runs"

_STATE_COLUMNS = [
    f for name in FIELD_NAMES for f in (pa.field(f"{name}_state", pa.string()),
                                        pa.field(f"{name}_confidence", pa.float32()))
]

RESULT_SCHEMA = pa.schema([
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("page", pa.int32(), nullable=False),
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("doc_type", pa.string()),
    pa.field("name", pa.string()),
    pa.field("id_number", pa.string()),
    pa.field("expiry_date", pa.date32()),
    pa.field("expiry_long_term", pa.bool_()),
    pa.field("orientation", pa.string()),
    pa.field("rotation_applied", pa.int16()),
    pa.field("skew_corrected", pa.float32()),
    pa.field("orientation_confidence", pa.float32()),
    pa.field("original_width", pa.int32()),
    pa.field("original_height", pa.int32()),
    pa.field("sent_width", pa.int32()),
    pa.field("sent_height", pa.int32()),
    pa.field("visual_tokens", pa.int32()),
    pa.field("backend", pa.string()),
    pa.field("model", pa.string()),
    pa.field("endpoint", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("latency_ms", pa.float32()),
    pa.field("attempts", pa.int16()),
    pa.field("checks", pa.list_(pa.string())),
    pa.field("check_failures", pa.list_(pa.string())),
    *_STATE_COLUMNS,
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("processed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("worker", pa.string()),  # Dask worker address, or "local" for the in-process path
])

FAILURE_SCHEMA = pa.schema([
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("sha256", pa.string()),
    pa.field("page", pa.int32()),
    pa.field("stage", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("retryable", pa.bool_(), nullable=False),
    pa.field("detail", pa.string()),
    pa.field("attempts", pa.int16()),
    pa.field("raw_response", pa.string()),
    pa.field("backend", pa.string()),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("failed_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

RAW_RESPONSE_LIMIT = 2000


def _now() -> datetime:
    return datetime.now(timezone.utc)


def result_row(record: Record, *, fingerprint: str, run_id: str, worker: str = "local") -> dict[str, Any]:
    """Flatten a Record into one results row (drops the pixels, keeps everything the table promises)."""
    ex, prep = record.extraction, record.prepared
    row: dict[str, Any] = {
        "source_path": ex.ref.rel_path,
        "page": ex.ref.page,
        "sha256": ex.ref.sha256,
        "doc_type": ex.fields.get("doc_type"),
        "name": ex.fields.get("name"),
        "id_number": ex.fields.get("id_number"),
        "expiry_date": date.fromisoformat(record.expiry_date) if record.expiry_date else None,
        "expiry_long_term": record.expiry_long_term,
        "orientation": ex.fields.get("orientation") or prep.orientation,
        "rotation_applied": (prep.rotation_applied + ex.rotation_correction) % 360,
        "skew_corrected": prep.skew_corrected,
        "orientation_confidence": prep.orientation_confidence,
        "original_width": prep.original_size[0],
        "original_height": prep.original_size[1],
        "sent_width": prep.sent_size[0],
        "sent_height": prep.sent_size[1],
        "visual_tokens": prep.visual_tokens,
        "backend": ex.backend,
        "model": ex.model,
        "endpoint": ex.endpoint,
        "prompt_tokens": ex.prompt_tokens,
        "completion_tokens": ex.completion_tokens,
        "latency_ms": ex.latency_ms,
        "attempts": ex.attempts,
        "checks": record.checks,
        "check_failures": list(ex.check_failures),
        "fingerprint": fingerprint,
        "run_id": run_id,
        "processed_at": _now(),
        "worker": worker,
    }
    for name in FIELD_NAMES:
        reading = ex.field_states.get(name)
        row[f"{name}_state"] = reading.state if reading else ("absent" if ex.fields.get(name) is None else "present")
        row[f"{name}_confidence"] = reading.confidence if reading else None
    return row


def failure_row(failure: Failure, *, fingerprint: str, run_id: str) -> dict[str, Any]:
    return {
        "source_path": failure.rel_path,
        "sha256": failure.sha256,
        "page": failure.page,
        "stage": failure.stage,
        "reason": str(failure.reason),
        "retryable": failure.retryable,
        "detail": redact(failure.detail),
        "attempts": failure.attempts,
        "raw_response": (failure.raw_response or None) and failure.raw_response[:RAW_RESPONSE_LIMIT],
        "backend": failure.backend,
        "fingerprint": fingerprint,
        "run_id": run_id,
        "failed_at": _now(),
    }


def write_part(out_dir: Path, table_name: str, schema: pa.Schema, rows: list[dict[str, Any]], *,
               run_id: str, run_date: date, part: int) -> Path:
    """Write rows as one Parquet file atomically (hidden temp name + rename in the same directory)."""
    folder = out_dir / table_name / f"run_date={run_date.isoformat()}"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"part-{run_id}-{part:05d}.parquet"
    tmp = folder / f".{final.name}.tmp"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp)
    with tmp.open("rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, final)
    return final


@dataclass
class RunWriter:
    """Buffers rows of one run and writes them in atomic parts of at most `flush_every` documents."""

    out_dir: Path
    run_id: str
    fingerprint: str
    flush_every: int = 500
    run_date: date = field(default_factory=lambda: _now().date())
    _results: list[dict[str, Any]] = field(default_factory=list)
    _failures: list[dict[str, Any]] = field(default_factory=list)
    _part: int = 0
    written: list[Path] = field(default_factory=list)

    def add(self, outcome: Record | Failure | Skipped, *, worker: str = "local") -> None:
        """Buffer one document's row (skips are only counted, never stored)."""
        if isinstance(outcome, Record):
            self._results.append(result_row(outcome, fingerprint=self.fingerprint, run_id=self.run_id, worker=worker))
        elif isinstance(outcome, Failure):
            self._failures.append(failure_row(outcome, fingerprint=self.fingerprint, run_id=self.run_id))
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if len(self._results) + len(self._failures) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        for name, schema, rows in ((RESULTS, RESULT_SCHEMA, self._results), (FAILURES, FAILURE_SCHEMA, self._failures)):
            if rows:
                self.written.append(write_part(self.out_dir, name, schema, rows, run_id=self.run_id,
                                               run_date=self.run_date, part=self._part))
        self._results, self._failures = [], []
        self._part += 1


def read_table(out_dir: Path, table_name: str, columns: list[str] | None = None,
               run_id: str | None = None) -> pa.Table | None:
    """The results or failures dataset (all runs, or one run), or None before the first run wrote one."""
    folder = out_dir / table_name
    if not folder.is_dir() or not any(folder.rglob("*.parquet")):
        return None
    schema = RESULT_SCHEMA if table_name == RESULTS else FAILURE_SCHEMA
    dataset = ds.dataset(folder, format="parquet", partitioning="hive", schema=schema.append(
        pa.field("run_date", pa.string())))
    return dataset.to_table(columns=columns, filter=None if run_id is None else ds.field("run_id") == run_id)


def done_keys(out_dir: Path, fingerprint: str) -> set[str]:
    """Document keys (`sha256:page`) that already have a result made with the same settings."""
    table = read_table(out_dir, RESULTS, ["sha256", "page", "fingerprint"])
    if table is None:
        return set()
    rows = table.to_pylist()
    return {f"{r['sha256']}:{r['page']}" for r in rows if r["fingerprint"] == fingerprint}


def write_run_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    return write_json_atomic(out_dir / RUNS / f"{summary['run_id']}.json", summary)


def latest_run_summary(out_dir: Path) -> dict[str, Any] | None:
    runs = sorted((out_dir / RUNS).glob("*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(runs[-1].read_text(encoding="utf-8")) if runs else None
