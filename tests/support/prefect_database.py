"""A Prefect database that a real server has already set up, copied in before a test's server starts.

Why: a Prefect server's first start on an empty SQLite database runs every migration and registers Prefect's
block types: 17-19 s of CPU until it answers, against 6-8 s on a set-up database. The suite
starts a few dozen servers whose subject is not that first start, and the suite is bound by CPU. The copy is made
once per test run (both test workers share it, under a file lock) by starting and stopping a real
`prefect server start` on an empty database, so each copy is what a second start of a user's server sees.

What a first start on an empty database does stays tested where it is the subject: the session's `prefect_api`
(Prefect's own test harness, on a database of its own), the run on a saturated CPU in
`integration/test_prefect_background.py`, and the installed wheel's run in `.ci/check_wheel`.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from filelock import FileLock

# The folder both test workers of one run share (the parent of their base temp folders); set by the session
# fixture in tests/conftest.py. None outside pytest: every server then starts on an empty database.
SHARED: Path | None = None


def copy_set_up_database(dest: Path) -> None:
    """Put a set-up Prefect database at `dest` unless a file is there already (a server of the test may be using
    it: a test may ask for the same environment twice)."""
    if dest.exists() or SHARED is None:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_template(SHARED), dest)


def _template(shared: Path) -> Path:
    """The set-up database of this run, made by the first test that asks for it."""
    path = shared / "prefect-set-up.db"
    with FileLock(str(shared / "prefect-set-up-db.lock")):
        if not path.exists():
            _make(path)
    return path


def _make(path: Path) -> None:
    """Start a real server on an empty database, stop it, and keep a consistent copy of what it wrote (the
    SQLite backup API: a write-ahead log left beside the file is folded in). The server alone is stopped, not
    the stack (`Stack.stop`, not `prefect_server`'s `stop_all`): nothing of the test process (where its events
    go) is touched."""
    from tests.support.prefect_server import server_stack, start_server

    work = path.parent / f"{path.stem}-work-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    stack = server_stack(work)
    try:
        start_server(stack)
    finally:
        stack.stop("server")
    building = path.with_suffix(".building")
    source, copy = sqlite3.connect(work / "prefect.db"), sqlite3.connect(building)
    try:
        source.backup(copy)
    finally:
        source.close()
        copy.close()
    building.replace(path)
    shutil.rmtree(work, ignore_errors=True)
