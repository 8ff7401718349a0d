"""Files a process holds an `flock` on for as long as it lives, so that another process can tell it is over.

Why: a process killed by SIGKILL, the OOM killer or a power cut leaves no word behind, but the kernel drops its
locks however it ends. So a file created locked, and kept locked until its process lets it go, says "my process
is over" the moment another process can take its lock. Two things make that reliable: the file is locked before
it gets its name (created as `.<name>.new`, locked, renamed), so a file under its own name is never seen
unlocked while its process lives; and a taker checks, once it holds the lock, that the file still has that name
(the process may have removed it, and another created one under the same name, in between). Used by the flow run
leases (`flows/run_lease.py`) and the crash journal (`pipeline/store/crash_journal.py`).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

PENDING_SUFFIX = ".new"
# A live process names its pending file microseconds after creating it, and locks it in between: only a pending
# file older than this is known to be left by a dead process (a younger one may not be locked yet).
PENDING_GRACE_S = 60.0


def pending_name(path: Path) -> Path:
    """Where `path` is created before it is locked and named."""
    return path.with_name(f".{path.name}{PENDING_SUFFIX}")


def is_pending(path: Path) -> bool:
    """Whether `path` is a pending name (`.<name>.new`)."""
    return path.name.startswith(".") and path.name.endswith(PENDING_SUFFIX)


def create_held(path: Path, flags: int = os.O_WRONLY | os.O_TRUNC) -> int:
    """Create `path` locked by this process (`flags` for the open, besides O_CREAT); its descriptor, whose closing
    (or this process's end) releases the lock."""
    pending = pending_name(path)
    fd = os.open(pending, flags | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(pending, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def take_if_over(path: Path) -> int | None:
    """A read descriptor of `path`, holding its lock, if the process that held it is over; None if it is alive,
    or the file is gone or no longer under that name. The caller closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            return fd
    except (BlockingIOError, FileNotFoundError):
        pass
    os.close(fd)
    return None


def too_young_to_judge(fd: int) -> bool:
    """Whether the pending file behind `fd` (its lock taken) is younger than `PENDING_GRACE_S`: a live process
    may have created it and not locked it yet, so an untaken lock proves nothing about it."""
    return time.time() - os.fstat(fd).st_mtime < PENDING_GRACE_S


def remove_if_abandoned(pending: Path) -> None:
    """Remove a pending file whose process died between creating and naming it (a kill at that instant): its lock
    can be taken and it is older than `PENDING_GRACE_S`. Such a file is empty (nothing is written to a held file
    before it is named), so nothing is lost; without this it would stay for good."""
    fd = take_if_over(pending)
    if fd is None:
        return
    try:
        if not too_young_to_judge(fd):
            pending.unlink(missing_ok=True)
    finally:
        os.close(fd)
