"""The failure queue as a work list: which failed documents to try again, and recording the ones resolved.

Nothing is ever deleted. A document (`sha256:page`) is *open* while it has failure rows and no resolution;
it is *resolved* once a result exists for it, which is recorded in the `resolutions` dataset
(`OUT/resolutions/run_date=.../part-*.parquet`: sha256, page, run_id, resolved_at, how). Attempts are the
document's failure rows (the original run counts as attempt 1), so the count survives restarts and needs no
extra state. Only documents whose latest failure is retryable (request errors, endpoint down; see
`RETRYABLE_REASONS`) are retried; everything else waits for a person.

No Prefect imports: the `retry-failures` flow passes a `slot` hook for the global concurrency limit.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds

from pipeline.backends.base import ExtractionBackend
from pipeline.config import Settings
from pipeline.containers import ContainerError, page_count
from pipeline.datamodel import DocumentRef, Record
from pipeline.ingest import sha256_file
from pipeline.backends.factory import make_backend
from pipeline.engine import Engine, RequestSlot
from pipeline.review.corrections import corrected_keys
from pipeline.tally import RunTally
from pipeline.store import FAILURES, RESULTS, RUNS, RunWriter, read_table, write_part, write_run_summary

RESOLUTIONS = "resolutions"
RESOLUTION_SCHEMA = pa.schema([
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("page", pa.int32(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),  # the run that produced the result
    pa.field("resolved_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("how", pa.string(), nullable=False),  # "retried" | "result_exists" (a later run succeeded)
])


@dataclass(frozen=True)
class OpenEntry:
    """One unresolved document of the failure queue, with where its file was found (None if nowhere)."""

    sha256: str
    page: int
    source_path: str
    attempts: int
    reason: str
    retryable: bool
    backend: str | None
    path: Path | None

    @property
    def key(self) -> str:
        return f"{self.sha256}:{self.page}"


@dataclass
class RetryReport:
    """What a retry run did; every open retryable entry lands in exactly one of the lists' counts."""

    run_id: str
    max_attempts: int
    resolved: int = 0
    still_failing: Counter[str] = field(default_factory=Counter)  # reason -> documents
    exhausted: int = 0  # retryable but out of attempts: needs a person now
    missing: int = 0  # source file gone or changed since the failure
    resolved_elsewhere: int = 0  # a later run already produced a result
    other_backend: int = 0  # failed on another backend; retried by a run with that backend

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "max_attempts": self.max_attempts, "resolved": self.resolved,
                "still_failing": dict(self.still_failing), "exhausted": self.exhausted, "missing": self.missing,
                "resolved_elsewhere": self.resolved_elsewhere, "other_backend": self.other_backend}

    def markdown(self) -> str:
        lines = [f"# idflow retry `{self.run_id}`", "", f"max attempts per document: {self.max_attempts}", "",
                 "| outcome | documents |", "|---|---:|",
                 f"| resolved by this run | {self.resolved} |",
                 f"| resolved earlier by another run | {self.resolved_elsewhere} |",
                 f"| out of attempts | {self.exhausted} |",
                 f"| source file missing or changed | {self.missing} |",
                 f"| left for a run with another backend | {self.other_backend} |"]
        lines += [f"| still failing: `{r}` | {n} |" for r, n in sorted(self.still_failing.items())]
        return "\n".join(lines)


def read_resolutions(out_dir: Path) -> pa.Table | None:
    folder = out_dir / RESOLUTIONS
    if not folder.is_dir() or not any(folder.rglob("*.parquet")):
        return None
    return ds.dataset(folder, format="parquet", partitioning="hive",
                      schema=RESOLUTION_SCHEMA.append(pa.field("run_date", pa.string()))).to_table()


def write_resolutions(out_dir: Path, resolved: Sequence[tuple[str, int, str]], *, run_id: str, how: str) -> None:
    """Append (sha256, page, resolving run id) rows as one atomic part."""
    if not resolved:
        return
    now = datetime.now(timezone.utc)
    rows = [{"sha256": s, "page": p, "run_id": r, "resolved_at": now, "how": how} for s, p, r in resolved]
    part = len(list((out_dir / RESOLUTIONS).rglob(f"part-{run_id}-*.parquet")))
    write_part(out_dir, RESOLUTIONS, RESOLUTION_SCHEMA, rows, run_id=run_id, run_date=now.date(), part=part)


def _input_dirs(out_dir: Path) -> dict[str, str]:
    """run id -> input folder, from the run summaries (retry runs have none: they span many folders)."""
    dirs: dict[str, str] = {}
    for path in (out_dir / RUNS).glob("*.json"):
        summary = json.loads(path.read_text(encoding="utf-8"))
        if summary.get("input_dir"):
            dirs[str(summary["run_id"])] = summary["input_dir"]
    return dirs


def _locate(rows: list[dict[str, Any]], input_dirs: dict[str, str]) -> Path | None:
    """The document's file today: relative path under one of the input folders of its failed runs, same bytes."""
    for row in rows:
        base = input_dirs.get(row["run_id"])
        candidate = Path(base) / row["source_path"] if base else None
        if candidate is not None and candidate.is_file() and sha256_file(candidate) == row["sha256"]:
            return candidate
    return None


def open_entries(out_dir: Path, *, locate: bool = True) -> tuple[list[OpenEntry], list[tuple[str, int, str]]]:
    """Unresolved documents of the failure queue, and (sha256, page, run id) of failed documents that a later
    run has since turned into a result (to be recorded as resolved)."""
    failures = read_table(out_dir, FAILURES)
    if failures is None:
        return [], []
    resolutions = read_resolutions(out_dir)
    resolved = set() if resolutions is None else {
        (r["sha256"], r["page"]) for r in resolutions.select(["sha256", "page"]).to_pylist()}
    results = read_table(out_dir, RESULTS, ["sha256", "page", "run_id"])
    result_run = {} if results is None else {(r["sha256"], r["page"]): r["run_id"] for r in results.to_pylist()}
    by_doc: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in failures.to_pylist():
        if row["sha256"] is not None and row["page"] is not None and (row["sha256"], row["page"]) not in resolved:
            by_doc[(row["sha256"], row["page"])].append(row)
    input_dirs = _input_dirs(out_dir) if locate else {}
    decided = corrected_keys(out_dir)  # a person's decision is final: never retried
    by_doc = {(s, p): rows for (s, p), rows in by_doc.items() if f"{s}:{p}" not in decided}
    entries, done_elsewhere = [], []
    for (sha, page), rows in sorted(by_doc.items()):
        if (sha, page) in result_run:
            done_elsewhere.append((sha, page, result_run[(sha, page)]))
            continue
        rows.sort(key=lambda r: r["failed_at"])
        last = rows[-1]
        entries.append(OpenEntry(sha256=sha, page=page, source_path=last["source_path"], attempts=len(rows),
                                 reason=last["reason"], retryable=bool(last["retryable"]), backend=last["backend"],
                                 path=_locate(rows, input_dirs) if locate and last["retryable"] else None))
    return entries, done_elsewhere


def _ref(entry: OpenEntry) -> DocumentRef | None:
    assert entry.path is not None
    try:
        pages = page_count(entry.path)
    except ContainerError:
        return None
    return DocumentRef(path=entry.path, rel_path=entry.source_path, sha256=entry.sha256, page=entry.page,
                       page_count=pages)


async def retry_failures(out_dir: Path, settings: Settings, *, run_id: str, max_attempts: int = 3,
                         backend: ExtractionBackend | None = None, slot: RequestSlot | None = None) -> RetryReport:
    """Run every open, retryable failure of `settings.backend` with attempts left through the normal batch
    path once more; write the new results or failures to OUT like any run, and record what got resolved.

    `max_attempts` counts the original run. `backend` is injectable for tests; `slot()` is held by each of the
    engine's extractors (the flow passes a slot of the cross-run request limit).
    """
    report = RetryReport(run_id=run_id, max_attempts=max_attempts)
    entries, done_elsewhere = open_entries(out_dir)
    write_resolutions(out_dir, done_elsewhere, run_id=run_id, how="result_exists")
    report.resolved_elsewhere = len(done_elsewhere)
    refs: list[DocumentRef] = []
    for entry in entries:
        if not entry.retryable:
            continue
        if entry.backend != settings.backend:
            report.other_backend += 1
        elif entry.attempts >= max_attempts:
            report.exhausted += 1
        elif entry.path is None or (ref := _ref(entry)) is None:
            report.missing += 1
        else:
            refs.append(ref)
    if not refs:
        return report

    resolved: list[tuple[str, int, str]] = []
    writer = RunWriter(out_dir, run_id, settings.fingerprint(), settings.flush_every)
    tally = RunTally(seen=len(refs))
    engine = Engine(settings, backend or make_backend(settings), request_slot=slot)
    try:
        async with engine:
            async for outcome in engine.run(refs):
                writer.add(outcome)
                tally.add(outcome)
                if isinstance(outcome, Record):
                    resolved.append((outcome.extraction.ref.sha256, outcome.extraction.ref.page, run_id))
                else:
                    report.still_failing[str(outcome.reason)] += 1
    finally:
        writer.flush()  # results on disk before they are recorded as resolving anything
        report.resolved = len(resolved)
        write_resolutions(out_dir, resolved, run_id=run_id, how="retried")
    summary = tally.summary(run_id=run_id, settings=settings)
    summary.update(input_dir=None, out_dir=str(out_dir), retry=report.as_dict())
    write_run_summary(out_dir, summary)
    return report
