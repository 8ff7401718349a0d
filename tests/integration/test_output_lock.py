"""One writer per output folder: a second holder refuses or waits, and a killed holder leaves OUT unlocked."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.store.output_lock import OutputBusy, hold_output, refusal_now
from pipeline.store.parquet import STALE_TEMP_PART_S
from tests.support.paths import REPO

HOLDER = """
import asyncio, sys
from pathlib import Path
from pipeline.store.output_lock import hold_output

async def main():
    async with hold_output(Path(sys.argv[1]), run_id="holder-run", wait=False):
        print("held", flush=True)
        await asyncio.to_thread(sys.stdin.readline)  # until told, or killed

asyncio.run(main())
"""


def test_a_killed_holder_releases_the_lock(tmp_path: Path) -> None:
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"

        async def try_once() -> None:
            async with hold_output(out, run_id="second", wait=False):
                pass

        with pytest.raises(OutputBusy, match="holder-run"):
            asyncio.run(try_once())
        assert "holder-run" in (refusal_now(out) or "")
        (out / "failures").mkdir()
        for command in (["run", str(out / "failures"), "--out", str(out)], ["retry", str(out)]):
            # refused before any flow starts: one line, not the traceback of a flow failing on the lock
            done = subprocess.run([sys.executable, "-m", "idflow", *command], cwd=REPO, capture_output=True,
                                  text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
            assert done.returncode == 2 and "holder-run" in done.stdout, done.stdout + done.stderr
            assert "Traceback" not in done.stdout + done.stderr
        holder.send_signal(signal.SIGKILL)  # no clean-up runs: the kernel drops the lock
        holder.wait(60)
        assert refusal_now(out) is None
        asyncio.run(try_once())
    finally:
        holder.kill()
        holder.wait(60)


def test_a_second_holder_in_the_same_process_waits_and_says_so(tmp_path: Path) -> None:
    """Two flows of one process (e.g. nightly's folders) on one OUT: the second waits without blocking the loop."""
    order: list[str] = []

    async def main() -> None:
        first_in, waiting = asyncio.Event(), asyncio.Event()

        async def first() -> None:
            async with hold_output(tmp_path, run_id="first", wait=False):
                order.append("first in")
                first_in.set()
                await waiting.wait()  # the event loop runs while the second waits
                order.append("first out")

        async def second() -> None:
            await first_in.wait()

            def on_wait(message: str) -> None:
                order.append("second waits" if "run first" in message else message)
                waiting.set()

            async with hold_output(tmp_path, run_id="second", wait=True, on_wait=on_wait):
                order.append("second in")

        await asyncio.gather(first(), second())

    asyncio.run(main())
    assert order == ["first in", "second waits", "first out", "second in"]


def test_the_next_holder_removes_temp_parts_a_killed_run_left(tmp_path: Path) -> None:
    """A run stopped between writing a part's temp file and renaming it leaves the temp file; the next holder of
    OUT's lock removes it at once when its table is written only under the lock (its run is over), and a
    correction's (saved without the lock) only once it is older than any live write takes; finished parts stay."""
    folder = tmp_path / "results" / "run_date=2026-11-30"
    corrections = tmp_path / "corrections" / "run_date=2026-11-30"
    folder.mkdir(parents=True)
    corrections.mkdir(parents=True)
    stale, fresh = folder / ".part-a-00000.parquet.1f.tmp", folder / ".part-b-00000.parquet.2e.tmp"
    old_correction = corrections / ".part-d-00000.parquet.3a.tmp"
    live_correction = corrections / ".part-e-00000.parquet.4b.tmp"
    part = folder / "part-c-00000.parquet"
    for f in (stale, fresh, part, old_correction, live_correction):
        f.write_bytes(b"x")
    hour_ago = time.time() - 2 * STALE_TEMP_PART_S
    for f in (stale, part, old_correction):
        os.utime(f, (hour_ago, hour_ago))

    async def hold() -> None:
        async with hold_output(tmp_path, run_id="next", wait=False):
            pass

    asyncio.run(hold())
    assert not stale.exists() and not fresh.exists() and part.exists()
    assert not old_correction.exists() and live_correction.exists()
