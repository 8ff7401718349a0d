"""The failure queue as current state: one row per failing document, however many runs it failed on.

The `failures` dataset is history: every failed attempt of every run is a row, and nothing is ever deleted. What
a person (`idflow show`, the review UI) and the retry need is the current state: each document (`sha256:page`;
an unhashed ingest failure by its path) once, with its latest attempt and the number of failed attempts, and
only while it is still failing, i.e. no result was stored for it after its latest failure.

Resolutions (`OUT/resolutions/run_date=.../part-*.parquet`: sha256, page, run_id, resolved_at, how) record how an
entry left the queue (`retried` by a retry run, or `result_exists`: a later run produced a result); they are a
log for people, the current state itself is derived from results and failures.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from pipeline.ingest.discover import sha256_file
from pipeline.review.corrections import corrected_keys
from pipeline.store.parquet import (
    FAILURE_SCHEMA,
    FAILURES,
    RESULTS,
    RUNS,
    path_bytes,
    read_dataset,
    read_table,
    run_input_dir,
    source_file_name,
    write_part,
)

RESOLUTIONS = "resolutions"
RESOLUTION_SCHEMA = pa.schema([
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("page", pa.int32(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),  # the run that produced the result
    pa.field("resolved_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("how", pa.string(), nullable=False),  # "retried" | "result_exists" (a later run succeeded)
])

# The latest failure row of each open document; `attempts` counts its failed attempts (runs), the latest row's
# own `attempts` (requests within that run) becomes `request_attempts`.
CURRENT_FAILURE_SCHEMA = pa.schema([
    *(FAILURE_SCHEMA.field(n) for n in FAILURE_SCHEMA.names if n not in ("attempts", "failed_at")),
    pa.field("attempts", pa.int32(), nullable=False),
    pa.field("request_attempts", pa.int16()),
    pa.field("failed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("first_failed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("run_ids", pa.list_(pa.string()), nullable=False),  # the runs it failed in, oldest first
])


@dataclass(frozen=True)
class _Document:
    """One document's failure history (oldest first) and whether a later result closed it."""

    rows: list[dict[str, Any]]
    resolved_by: str | None  # run id of the result stored after the latest failure

    @property
    def latest(self) -> dict[str, Any]:
        return self.rows[-1]


def _failure_key(row: dict[str, Any]) -> tuple[Any, ...]:
    """The document a failure row is about. A failure of a whole file (no page: empty, not openable) is one per
    path even when files share their content: each is an upload someone has to look at."""
    if row["sha256"] is not None:
        if row["page"] is None:
            return ("sha256", row["sha256"], None, _stored_bytes(row))
        return ("sha256", row["sha256"], row["page"])
    return ("path", _stored_bytes(row), row["page"])


def _stored_bytes(row: dict[str, Any]) -> bytes:
    return row["source_path_bytes"] if row.get("source_path_bytes") is not None else path_bytes(row["source_path"])


def _documents(out_dir: Path) -> list[_Document]:
    """Every document with failure rows, with its history and whether a result came after its last failure.

    A hashed failure is closed by a result for the same content and page (a failure without a page, such as a
    container that could not be opened, by any page of that content); an unhashed one (unreadable file,
    symlink refused) by a result for the same path."""
    failures = read_table(out_dir, FAILURES)
    if failures is None:
        return []
    results = read_table(out_dir, RESULTS, ["sha256", "page", "source_path", "source_path_bytes", "run_id",
                                            "processed_at"])
    latest_result: dict[tuple[Any, ...], tuple[datetime, str]] = {}
    for r in [] if results is None else results.to_pylist():
        for key in (("sha256", r["sha256"], r["page"]), ("sha256", r["sha256"], None), ("path", _stored_bytes(r))):
            if key not in latest_result or latest_result[key][0] < r["processed_at"]:
                latest_result[key] = (r["processed_at"], r["run_id"])
    history: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for row in failures.to_pylist():
        history[_failure_key(row)].append(row)
    documents = []
    for key, rows in history.items():
        rows.sort(key=lambda r: r["failed_at"])
        closer = latest_result.get(key[:3] if key[0] == "sha256" else key[:2])
        resolved = closer is not None and closer[0] > rows[-1]["failed_at"]
        documents.append(_Document(rows, closer[1] if resolved else None))
    return documents


def current_failures(out_dir: Path, *, with_decided: bool = False) -> pa.Table:
    """The failure queue now: one row per document still failing and not decided by a person (`with_decided`:
    those too, for the review page, which shows them settled), latest failure first (empty table when there is
    none). For `idflow show`, the review UI and the retry."""
    rows = []
    decided = set() if with_decided else corrected_keys(out_dir)
    for doc in _documents(out_dir):
        if doc.resolved_by is not None or _decided(doc, decided):
            continue
        latest = {k: v for k, v in doc.latest.items() if k in CURRENT_FAILURE_SCHEMA.names}
        rows.append({**latest, "attempts": len(doc.rows), "request_attempts": doc.latest["attempts"],
                     "first_failed_at": doc.rows[0]["failed_at"], "run_ids": [r["run_id"] for r in doc.rows]})
    rows.sort(key=lambda r: r["failed_at"], reverse=True)
    return pa.Table.from_pylist(rows, schema=CURRENT_FAILURE_SCHEMA)


@dataclass(frozen=True)
class OpenEntry:
    """One document of the current failure queue, with its failure rows (oldest first) for finding its file."""

    sha256: str | None
    page: int | None
    source_path: str  # as the file system names it (not necessarily UTF-8: surrogate escapes)
    attempts: int
    reason: str
    retryable: bool
    backend: str | None
    history: tuple[dict[str, Any], ...] = field(repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.sha256}:{self.page}"


def read_resolutions(out_dir: Path) -> pa.Table | None:
    return read_dataset(out_dir, RESOLUTIONS, RESOLUTION_SCHEMA)


def write_resolutions(out_dir: Path, resolved: Sequence[tuple[str, int, str]], *, run_id: str, how: str) -> None:
    """Append (sha256, page, resolving run id) rows as one atomic part (the caller holds OUT's lock)."""
    if not resolved:
        return
    now = datetime.now(timezone.utc)
    rows = [{"sha256": s, "page": p, "run_id": r, "resolved_at": now, "how": how} for s, p, r in resolved]
    part = len(list((out_dir / RESOLUTIONS).rglob(f"part-{run_id}-*.parquet")))
    write_part(out_dir, RESOLUTIONS, RESOLUTION_SCHEMA, rows, run_id=run_id, run_date=now.date(), part=part)


def input_dirs(out_dir: Path) -> dict[str, Path]:
    """run id -> the folder its documents came from, from the run summaries (retry runs have none)."""
    dirs: dict[str, Path] = {}
    for path in (out_dir / RUNS).glob("*.json"):
        try:
            summary = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):  # a summary being replaced right now
            continue
        folder = run_input_dir(summary, out_dir)
        if folder is not None:
            dirs[str(summary["run_id"])] = folder
    return dirs


def locate(entry: OpenEntry, dirs: dict[str, Path]) -> Path | None:
    """The document's file today: its stored relative path (exact bytes) under the input folder of one of the
    runs it failed in, latest first, holding the same bytes as when it failed (None: gone or changed)."""
    for row in reversed(entry.history):
        base = dirs.get(row["run_id"])
        candidate = base / source_file_name(row) if base is not None and row["sha256"] is not None else None
        if candidate is not None and candidate.is_file() and sha256_file(candidate) == row["sha256"]:
            return candidate
    return None


def _decided(doc: _Document, decided: set[str]) -> bool:
    """A person decided on the document (a failure without a page, a file that could not be opened, is decided
    as its page 0, as the review page keys it)."""
    return f"{doc.latest['sha256']}:{doc.latest['page'] or 0}" in decided


def open_entries(out_dir: Path) -> tuple[list[OpenEntry], list[tuple[str, int, str]]]:
    """The current queue as entries, and (sha256, page, run id) of documents a later run has turned into a
    result that no resolution records yet."""
    resolutions = read_resolutions(out_dir)
    recorded = set() if resolutions is None else {
        (r["sha256"], r["page"], r["run_id"]) for r in resolutions.select(["sha256", "page", "run_id"]).to_pylist()}
    decided = corrected_keys(out_dir)  # a person's decision is final: never retried
    entries, done_elsewhere = [], []
    for doc in sorted(_documents(out_dir), key=lambda d: (d.latest["sha256"] or "", d.latest["page"] or 0)):
        last = doc.latest
        if _decided(doc, decided):
            continue
        if doc.resolved_by is not None:
            if last["sha256"] is not None and last["page"] is not None:
                resolution = (last["sha256"], last["page"], doc.resolved_by)
                if resolution not in recorded:
                    done_elsewhere.append(resolution)
            continue
        entries.append(OpenEntry(sha256=last["sha256"], page=last["page"], source_path=source_file_name(last),
                                 attempts=len(doc.rows), reason=last["reason"], retryable=bool(last["retryable"]),
                                 backend=last["backend"], history=tuple(doc.rows)))
    return entries, done_elsewhere
