"""One writer per output folder: an OS file lock on `OUT/.idflow.lock`, held for a whole run.

Why: two runs on one OUT (two `idflow run`s, nightly plus on-upload, several `idflow serve` workers) would both
compute the already-done set before either wrote anything, then extract, pay for and store the same documents
twice. Holding the lock from before `done_keys` until the run summary is written serialises runs on OUT, so the
second run skips what the first did. The lock is `filelock`'s flock lock: the kernel releases it when the holder
dies, however it dies (SIGKILL, OOM, power loss of a client of a local disk), so a crash never leaves OUT locked.
`fallback_to_soft=False`: a file system without flock is refused instead of silently getting a lock file that a
killed run would leave behind.

Who holds it is written beside the lock (`.idflow.lock.owner.json`), only so that a refused or waiting run can
say which run it is waiting for; the lock itself is the kernel's. A new holder also removes the temp parts a
killed holder left behind (`store.remove_stale_temp_parts`).

A command takes the lock itself before it starts a flow (`hold_output(..., lend=True)`), so a busy OUT is refused
before any flow run exists, and the run session inside that flow takes it again. The lending hold puts a loan in
its call chain's context (a `ContextVar`, which the flow and its tasks inherit): one hold at a time inside that
chain runs under the loan instead of the lock (it only names the real run in the owner note). Any other hold,
another flow of the same process included, waits or is refused like a run of another process.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from pathlib import Path

from filelock import AsyncFileLock, FileLock, Timeout

from pipeline.store.atomic import write_json_atomic
from pipeline.store.parquet import remove_stale_temp_parts

LOCK_NAME = ".idflow.lock"
OWNER_NAME = ".idflow.lock.owner.json"


class OutputBusy(RuntimeError):
    """Another run holds the output folder and this one was asked not to wait."""


class OutputUnwritable(RuntimeError):
    """OUT (its lock file) cannot be created or written: a read-only file system, no permission, no space."""


class _Loan:
    """OUT's lock held by a caller for the one hold it starts below it (`in_use` while that hold runs)."""

    def __init__(self) -> None:
        self.in_use = False


# Resolved output folder -> the loan its holder offers this call chain (the tasks it starts inherit the mapping).
_LOANS: ContextVar[dict[str, _Loan]] = ContextVar("idflow_output_loans", default={})


def holder(out_dir: Path) -> str:
    """Who holds OUT, as far as the owner note says (it may be a moment behind the lock)."""
    try:
        note = json.loads((out_dir / OWNER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "another run"
    return f"run {note.get('run_id')} (pid {note.get('pid')} on {note.get('host')}, since {note.get('since')})"


@asynccontextmanager
async def hold_output(out_dir: Path, *, run_id: str, wait: bool, on_wait: Callable[[str], object] | None = None,
                      lend: bool = False) -> AsyncIterator[None]:
    """Hold OUT's lock for the block. Busy: raise `OutputBusy` (`wait=False`), or report through `on_wait`
    and wait as long as it takes (`wait=True`). The waiting polls in a thread, so the event loop keeps running
    (several flows of one process may wait on the same OUT). `lend`: one hold started inside the block (the run
    session of the flow this caller starts) runs under this one. OUT not writable: `OutputUnwritable`."""
    key = str(out_dir.resolve())
    loan = _LOANS.get().get(key)
    if loan is not None and not loan.in_use:
        loan.in_use = True
        try:
            _write_owner(out_dir, run_id)
            yield
        finally:
            loan.in_use = False
        return
    lock = AsyncFileLock(out_dir / LOCK_NAME, fallback_to_soft=False)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            await lock.acquire(timeout=0)
        except Timeout:
            busy = _busy(out_dir)
            if not wait:
                raise OutputBusy(_refusal(busy)) from None
            if on_wait is not None:
                on_wait(f"waiting for the output lock: {busy}")
            await lock.acquire()
    except OSError as exc:
        raise OutputUnwritable(unwritable(out_dir, exc)) from exc
    lent = _LOANS.set({**_LOANS.get(), key: _Loan()}) if lend else None
    try:
        _write_owner(out_dir, run_id)
        remove_stale_temp_parts(out_dir)
        yield
    finally:
        if lent is not None:
            try:
                _LOANS.reset(lent)
            except ValueError:  # left in another context than it was entered in: that context ends with it
                pass
        await lock.release()


def unwritable(out_dir: Path, exc: OSError) -> str:
    """The one line for an OUT that cannot be written: the path, the system's reason, what to do."""
    where = exc.filename or out_dir
    return (f"output folder {out_dir} cannot be written ({exc.strerror or exc} at {where}): choose another --out, "
            "or make it writable, and run again")


def _write_owner(out_dir: Path, run_id: str) -> None:
    try:
        write_json_atomic(out_dir / OWNER_NAME, {"run_id": run_id, "pid": os.getpid(),
                                                 "host": socket.gethostname(),
                                                 "since": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    except OSError as exc:
        raise OutputUnwritable(unwritable(out_dir, exc)) from exc


def _busy(out_dir: Path) -> str:
    return f"{out_dir} is being written by {holder(out_dir)}"


def _refusal(busy: str) -> str:
    return f"{busy}; one run writes an output folder at a time: try again when it ends, or pass --wait"


def refusal_now(out_dir: Path) -> str | None:
    """What a run that does not wait would be told now, or None when OUT is free. Only a look (the run still takes
    the lock for real, and may still be refused): a command asks before it starts a flow, so a busy OUT is one line
    rather than a flow failing on it, whose traceback Prefect's engine logs. A lock file that cannot be opened for
    writing (OUT read-only after a first run; any `OSError`, which is what every `filelock` release raises for it,
    from whichever of its functions) raises `OutputUnwritable`, the line `hold_output` gives."""
    if not (out_dir / LOCK_NAME).is_file():
        return None
    lock = FileLock(out_dir / LOCK_NAME, fallback_to_soft=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return _refusal(_busy(out_dir))
    except OSError as exc:
        raise OutputUnwritable(unwritable(out_dir, exc)) from exc
    lock.release()
    return None
