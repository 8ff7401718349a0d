"""The retry run: open failure-queue entries that may succeed on another try go through the engine again.

What is retried: documents whose latest failure is retryable (request errors, endpoint down; see
`RETRYABLE_REASONS`) until they have failed `max_attempts` times (the original run counts), and `internal_error`
(a bug in idflow, recorded per document by the engine) once more, i.e. 2 attempts in total, since a bug that
fails twice will fail again. Everything else waits for a person. Entries are retried with the backend the
retry is given, whatever backend recorded them (hybrid, batch import, vLLM fallback): a failure is about the
document, not about the backend that happened to meet it.

No Prefect imports: the `retry-failures` flow and `idflow retry` pass a `slot` hook for the global concurrency
limit. The run is a `RunSession` like any run: it holds OUT's lock from before it reads the queue until its summary
is written.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.datamodel import RETRYABLE_REASONS, DocumentRef, Reason, Record
from pipeline.extract.base import ExtractionBackend
from pipeline.extract.factory import make_backend
from pipeline.ingest.containers import ContainerError, page_count
from pipeline.review.failure_queue import OpenEntry, input_dirs, locate, open_entries, write_resolutions
from pipeline.run.batches import Batch, BatchCounts, BatchRouter, Outcome, drive_batches, local_outcomes, record_batch
from pipeline.run.engine import Engine, RequestSlot
from pipeline.run.session import Done, RunSession
from pipeline.settings import Settings

BatchRunner = Callable[[Batch, Callable[[Outcome, str], object]], Awaitable[BatchCounts]]
INTERNAL_ERROR_ATTEMPTS = 2  # a bug gets one more try, then a person looks at it


@dataclass
class RetryReport:
    """What a retry run did; every open entry lands in exactly one count."""

    run_id: str
    backend: str
    max_attempts: int
    resolved: int = 0
    still_failing: Counter[str] = field(default_factory=Counter)  # reason -> documents
    exhausted: int = 0  # retryable but out of attempts: needs a person now
    for_a_person: int = 0  # not retryable (the document itself, or an ingest failure)
    missing: int = 0  # source file gone or changed since the failure
    resolved_elsewhere: int = 0  # a later run already produced a result

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "backend": self.backend, "max_attempts": self.max_attempts,
                "resolved": self.resolved, "still_failing": dict(self.still_failing), "exhausted": self.exhausted,
                "for_a_person": self.for_a_person, "missing": self.missing,
                "resolved_elsewhere": self.resolved_elsewhere}

    def markdown(self) -> str:
        lines = [f"# idflow retry `{self.run_id}` ({self.backend})", "",
                 f"max attempts per document: {self.max_attempts} ({INTERNAL_ERROR_ATTEMPTS} for internal errors)",
                 "", "| outcome | documents |", "|---|---:|",
                 f"| resolved by this run | {self.resolved} |",
                 f"| resolved earlier by another run | {self.resolved_elsewhere} |",
                 f"| out of attempts | {self.exhausted} |",
                 f"| not retryable: for a person | {self.for_a_person} |",
                 f"| source file missing or changed | {self.missing} |"]
        lines += [f"| still failing: `{r}` | {n} |" for r, n in sorted(self.still_failing.items())]
        return "\n".join(lines)


def attempt_limit(reason: str, max_attempts: int) -> int:
    """How many failed attempts a document may have and still be retried (0: never retried)."""
    if reason == Reason.INTERNAL_ERROR:
        return min(max_attempts, INTERNAL_ERROR_ATTEMPTS)
    return max_attempts if reason in RETRYABLE_REASONS else 0


def _ref(entry: OpenEntry, dirs: dict[str, Path]) -> DocumentRef | None:
    """The entry's page to extract again, if its file is still there with the same bytes."""
    path = locate(entry, dirs)
    if path is None or entry.sha256 is None or entry.page is None:
        return None
    try:
        pages = page_count(path)
    except ContainerError:
        return None
    return DocumentRef(path=path, rel_path=entry.source_path, sha256=entry.sha256, page=entry.page,
                       page_count=pages)


async def retry_failures(out_dir: Path, settings: Settings, *, run_id: str, max_attempts: int = 3,
                         backend: ExtractionBackend | None = None, slot: RequestSlot | None = None,
                         wait: bool = True, on_wait: Callable[[str], object] | None = None,
                         run_batch: BatchRunner = record_batch) -> RetryReport:
    """Run every open entry with attempts left through the engine once more with `settings.backend`; write the
    new results or failures to OUT like any run, and record what got resolved.

    `backend` is injectable for tests; `slot()` is held by each of the engine's extractors; `run_batch` stores
    each batch of documents (the flow's makes each a task run). OUT busy: wait (`wait`, reported through
    `on_wait`) or raise `OutputBusy`. A retry with nothing to retry writes no summary.
    """
    report = RetryReport(run_id=run_id, backend=settings.backend, max_attempts=max_attempts)
    async with RunSession.open(out_dir, run_id=run_id, settings=settings, done=Done.NOTHING, wait=wait,
                               on_wait=on_wait) as run:
        refs = _plan(out_dir, run_id, max_attempts, report)
        if not refs:
            run.write_summary = False  # nothing ran: the latest run summary stays the last real run's
            return report
        run.see(len(refs))
        resolved: list[tuple[str, int, str]] = []

        def record(outcome: Outcome, worker: str) -> None:
            run.record(outcome, worker=worker)
            if isinstance(outcome, Record):
                resolved.append((outcome.extraction.ref.sha256, outcome.extraction.ref.page, run_id))
            else:
                report.still_failing[str(outcome.reason)] += 1

        engine = Engine(settings, backend or make_backend(settings), request_slot=slot, journal=run.journal)
        router = BatchRouter(settings.batch_size, asyncio.get_running_loop())
        try:
            async with engine:
                await drive_batches(router, local_outcomes(engine.run(router.assign(refs))),
                                    lambda batch: run_batch(batch, record), record)
        finally:
            demoted = run.flush()  # results on disk before they are recorded as resolving anything
            lost = {(f.sha256, f.page) for f in demoted}
            resolved = [r for r in resolved if (r[0], r[1]) not in lost]
            for failure in demoted:
                report.still_failing[str(failure.reason)] += 1
            report.resolved = len(resolved)
            write_resolutions(out_dir, resolved, run_id=run_id, how="retried")
        run.summary_extra.update(input_dir=None, out_dir=str(out_dir), retry=report.as_dict())
    return report


def _plan(out_dir: Path, run_id: str, max_attempts: int, report: RetryReport) -> list[DocumentRef]:
    """The pages to extract again; every other open entry is counted in `report` (read under OUT's lock)."""
    entries, done_elsewhere = open_entries(out_dir)
    write_resolutions(out_dir, done_elsewhere, run_id=run_id, how="result_exists")
    report.resolved_elsewhere = len(done_elsewhere)
    dirs = input_dirs(out_dir)
    refs: list[DocumentRef] = []
    for entry in entries:
        limit = attempt_limit(entry.reason, max_attempts) if entry.sha256 is not None else 0
        if limit == 0:
            report.for_a_person += 1
        elif entry.attempts >= limit:
            report.exhausted += 1
        elif (ref := _ref(entry, dirs)) is None:
            report.missing += 1
        else:
            refs.append(ref)
    return refs
