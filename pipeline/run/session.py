"""One run on an output folder, from taking OUT's lock to writing the run summary.

Every entry point that writes OUT (the extract flow and its shards and Dask mode, the failure-queue retry, a batch
import, the sharded parent) runs inside `RunSession.open`, so the order that keeps the accounting true is written
once: take OUT's lock before reading what is done (two runs never both extract a document), journal the pages
being prepared (a page that kills the process is prepared alone next time), buffer rows into atomic Parquet parts,
flush them even when the run stops on an error (what was extracted is kept), move the results the writer could not
store to the failures before counting, and write `runs/<run_id>.json` only for a run that finished. The summary
counts the run's records whose document number another document of OUT shows with another name or expiry date
(`pipeline.review.conflicts`), found once the run's parts are written, under the lock.

No Prefect here: flows pass a logger-like `on_wait` and do their publishing after the session closes.

OUT that stops taking files during the run (disk full, remounted read-only, permissions) ends the session with
`OutputWriteError`, whose message is the one line a person needs: the path, how many of the run's documents are
stored and kept, and what to do; the system's error stays chained to it for the log.
"""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from pipeline.datamodel import Failure, Record, Skipped
from pipeline.extract import registry
from pipeline.review.conflicts import NO_CONFLICTS, own_conflicts
from pipeline.review.corrections import not_to_read_again
from pipeline.run.tally import RunTally
from pipeline.settings import Settings
from pipeline.store.crash_journal import CrashJournal
from pipeline.store.output_lock import hold_output
from pipeline.store.parquet import RunWriter, write_run_summary

Outcome = Record | Failure | Skipped

_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_NOT_WRITABLE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


class OutputWriteError(RuntimeError):
    """OUT could not take what the run had to write; what was stored before stays (the message says how much)."""


def first_in_chain(exc: BaseException, test: Callable[[BaseException], bool]) -> BaseException | None:
    """The first error `test` accepts among `exc`, its causes and contexts and the members of its groups (each
    looked at once, so a cycle ends), or None: what a wrapped error really was, however deep it was raised."""
    pending, seen = [exc], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if test(current):
            return current
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return None


def storage_problem(exc: BaseException) -> OSError | None:
    """The OS error in `exc` (itself, its causes and contexts, the members of a group) that says OUT's file system
    is full or not writable, or None."""
    found = first_in_chain(exc, lambda e: isinstance(e, OSError) and e.errno in _FULL | _NOT_WRITABLE)
    return found if isinstance(found, OSError) else None


def what_to_do(problem: OSError) -> str:
    return "free space and run again" if problem.errno in _FULL else "make it writable and run again"


def _where(problem: OSError, out_dir: Path) -> str:
    return f"{problem.filename or out_dir} could not be written ({problem.strerror or problem})"


def review_stopped_line(problem: OSError, out_dir: Path, summary: dict[str, Any]) -> str:
    """What a run is told when OUT stops taking files after its documents are stored (its review page): all of
    them are kept and counted, only the page is missing, and the next run writes it."""
    return (f"{_where(problem, out_dir)}; the run stopped after storing all of its {summary['results']} results "
            f"and {summary['failures']} failures in {out_dir}, which are kept: only its review page is missing, "
            f"which the next run writes: {what_to_do(problem)}")


class Done(Enum):
    """Which earlier documents a run leaves alone (a person's decision is final in every case but NOTHING)."""

    SAME_SETTINGS = "same_settings"  # a result made with this run's fingerprint (a run, a retry)
    ANY_RESULT = "any_result"  # a result made by any run (a batch import adds no competing rows)
    NOTHING = "nothing"  # `--force`: read everything again


@dataclass
class RunSession:
    """The bookkeeping of one run: feed it with `see` (an item discovered) and `record` (its outcome).

    `summary_extra` is merged into the run summary; `summarize`, when set, turns the tally's summary into the
    stored one (the sharded parent adds its shards' counts). `conflict_runs`: the runs whose records the summary's
    `number_conflicts` counts (default this run; the sharded parent: its shards). After the block, `summary` is
    what was written."""

    out_dir: Path
    run_id: str
    settings: Settings
    writer: RunWriter
    tally: RunTally
    done: frozenset[str] = frozenset()
    journal: CrashJournal | None = None
    summary_extra: dict[str, Any] = field(default_factory=dict)
    summarize: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    summary: dict[str, Any] | None = None
    write_summary: bool = True  # False: a run that turned out to have nothing to do leaves no summary
    conflict_runs: set[str] | None = None
    _demoted_counted: int = 0

    @classmethod
    @asynccontextmanager
    async def open(cls, out_dir: Path, *, run_id: str, settings: Settings, fingerprint: str | None = None,
                   done: Done = Done.SAME_SETTINGS, lock: bool = True, wait: bool = True,
                   on_wait: Callable[[str], object] | None = None,
                   journal: bool = True) -> AsyncIterator[RunSession]:
        """Hold OUT for the block and write the summary when it ends without an error.

        `fingerprint` labels the rows (default: the settings'); `lock=False` for a shard, which runs under its
        parent's lock; OUT busy: wait (`wait`, reported through `on_wait`) or raise `OutputBusy`; `journal=False`
        for a run that prepares no page (a batch import, the sharded parent)."""
        fingerprint = fingerprint or registry.fingerprint(settings)
        session: RunSession | None = None
        try:
            async with AsyncExitStack() as stack:
                if lock:
                    await stack.enter_async_context(hold_output(out_dir, run_id=run_id, wait=wait,
                                                                on_wait=on_wait))
                writer = RunWriter(out_dir, run_id, fingerprint, settings.flush_every)
                tally = RunTally(threshold=settings.review.threshold, run_date=writer.run_date)
                session = cls(out_dir, run_id, settings, writer, tally, done=_done_set(out_dir, done, fingerprint))
                if journal:
                    session.journal = stack.enter_context(CrashJournal.open(out_dir, run_id))
                try:
                    yield session
                finally:
                    session.flush()
                if session.write_summary:
                    session.summary = session._write_summary()
        except Exception as exc:
            problem = storage_problem(exc)
            if problem is None or session is None:
                raise
            raise OutputWriteError(session.stopped_line(problem)) from exc

    def stopped_line(self, problem: OSError) -> str:
        """What a run stopped by OUT's file system is told: where, how much of the run is kept, what to do."""
        stored, finished = self.writer.stored, self.tally.finished
        return (f"{_where(problem, self.out_dir)}; the run stopped: {stored} of its {finished} finished documents "
                f"are stored in {self.out_dir} and kept, the other {max(finished - stored, 0)} are read again by "
                f"the next run: {what_to_do(problem)}")

    def see(self, count: int = 1) -> None:
        """`count` items were handed to the run: each must come back through `record`."""
        self.tally.seen += count

    def record(self, outcome: Outcome, *, worker: str = "local") -> None:
        """One item's outcome: buffered for Parquet (skips are only counted) and counted."""
        self.writer.add(outcome, worker=worker)
        self.tally.add(outcome)

    def flush(self) -> list[Failure]:
        """Write what is buffered; return every result the writer could not store and stored as a failure instead,
        each moved from results to failures in the tally once (safe to call again)."""
        self.writer.flush()
        for failure in self.writer.demoted[self._demoted_counted:]:
            self.tally.demote(failure)
        self._demoted_counted = len(self.writer.demoted)
        return list(self.writer.demoted)

    @property
    def finished(self) -> int:
        return self.tally.finished

    def _write_summary(self) -> dict[str, Any]:
        summary = self.tally.summary(run_id=self.run_id, settings=self.settings)
        summary["number_conflicts"], conflicting = self._conflicts()
        summary["decisions"] = self.tally.decision_counts(conflicting)
        summary.update(self.summary_extra)
        if self.summarize is not None:
            summary = self.summarize(summary)
        write_run_summary(self.out_dir, summary)
        return summary

    def _conflicts(self) -> tuple[dict[str, Any], set[str]]:
        """The run's records in a number conflict, counted for the summary, and their keys (none to look for when
        it stored no result)."""
        if self.conflict_runs is None and self.tally.results == 0:
            return dict(NO_CONFLICTS), set()
        return own_conflicts(self.out_dir, self.conflict_runs or {self.run_id})


def _done_set(out_dir: Path, done: Done, fingerprint: str) -> frozenset[str]:
    """Read under the lock: a run waiting for another sees what that one stored."""
    if done is Done.NOTHING:
        return frozenset()
    return not_to_read_again(out_dir, fingerprint if done is Done.SAME_SETTINGS else None)
