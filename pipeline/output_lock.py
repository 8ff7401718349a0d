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
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path

from filelock import AsyncFileLock, FileLock, Timeout

from pipeline.atomic import write_json_atomic
from pipeline.store import remove_stale_temp_parts

LOCK_NAME = ".idflow.lock"
OWNER_NAME = ".idflow.lock.owner.json"


class OutputBusy(RuntimeError):
    """Another run holds the output folder and this one was asked not to wait."""


def holder(out_dir: Path) -> str:
    """Who holds OUT, as far as the owner note says (it may be a moment behind the lock)."""
    try:
        note = json.loads((out_dir / OWNER_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "another run"
    return f"run {note.get('run_id')} (pid {note.get('pid')} on {note.get('host')}, since {note.get('since')})"


@asynccontextmanager
async def hold_output(out_dir: Path, *, run_id: str, wait: bool,
                      on_wait: Callable[[str], object] | None = None) -> AsyncIterator[None]:
    """Hold OUT's lock for the block. Busy: raise `OutputBusy` (`wait=False`), or report through `on_wait`
    and wait as long as it takes (`wait=True`). The waiting polls in a thread, so the event loop keeps running
    (several flows of one process may wait on the same OUT)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = AsyncFileLock(out_dir / LOCK_NAME, fallback_to_soft=False)
    try:
        await lock.acquire(timeout=0)
    except Timeout:
        busy = _busy(out_dir)
        if not wait:
            raise OutputBusy(_refusal(busy)) from None
        if on_wait is not None:
            on_wait(f"waiting for the output lock: {busy}")
        await lock.acquire()
    try:
        write_json_atomic(out_dir / OWNER_NAME, {"run_id": run_id, "pid": os.getpid(), "host": socket.gethostname(),
                                                 "since": datetime.now(timezone.utc).isoformat(timespec="seconds")})
        remove_stale_temp_parts(out_dir)
        yield
    finally:
        await lock.release()


def _busy(out_dir: Path) -> str:
    return f"{out_dir} is being written by {holder(out_dir)}"


def _refusal(busy: str) -> str:
    return f"{busy}; one run writes an output folder at a time: try again when it ends, or pass --wait"


def refusal_now(out_dir: Path) -> str | None:
    """What a run that does not wait would be told now, or None when OUT is free. Only a look (the run still takes
    the lock for real, and may still be refused): a command asks before it starts a flow, so a busy OUT is one line
    rather than a flow failing on it, whose traceback Prefect's engine logs."""
    if not (out_dir / LOCK_NAME).is_file():
        return None
    lock = FileLock(out_dir / LOCK_NAME, fallback_to_soft=False)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return _refusal(_busy(out_dir))
    lock.release()
    return None
