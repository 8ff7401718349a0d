"""A page that kills the run is prepared alone next time: the crash journal and the isolated preparation, with real
processes (a SIGKILLed run, a segfaulting and a hanging child)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.datamodel import DocumentRef, Failure, PreparedImage, Reason
from pipeline.extract.factory import make_backend
from pipeline.ingest.discover import Discovery
from pipeline.prepare import prepare_page
from pipeline.prepare.isolated import prepare_isolated
from pipeline.run.engine import Engine
from pipeline.settings import PrepareSettings, Settings
from pipeline.store.crash_journal import JOURNAL_DIR, CrashJournal, unfinished_keys
from pipeline.store.held_file import PENDING_GRACE_S
from tests.support import isolation_targets
from tests.support.paths import REPO


def _run_then_die(out: Path, run_id: str, begun: list[str], ended: list[str]) -> None:
    """A real run process that journals, then is killed by SIGKILL (nothing in Python runs after)."""
    code = (f"import os, signal\nfrom pathlib import Path\nfrom pipeline.store.crash_journal import CrashJournal\n"
            f"j = CrashJournal.open(Path({str(out)!r}), {run_id!r})\n"
            f"for k in {begun!r}: j.begin(k)\nfor k in {ended!r}: j.end(k)\n"
            f"os.kill(os.getpid(), signal.SIGKILL)\n")
    died = subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120)
    assert died.returncode == -9


def test_a_dead_runs_unfinished_pages_are_suspects_and_survive_the_next_runs_death(tmp_path: Path) -> None:
    _run_then_die(tmp_path, "run-1", begun=["a:0", "b:0", "c:1"], ended=["b:0"])
    # The next run takes them over, meets none of them and dies too: they must not be lost with it.
    _run_then_die(tmp_path, "run-2", begun=["d:0"], ended=["d:0"])
    with CrashJournal.open(tmp_path, "run-3") as journal:
        assert journal.suspects == {"a:0", "c:1"}
        assert list((tmp_path / JOURNAL_DIR).iterdir()) == [journal.path]  # the dead ones taken over
        for key in sorted(journal.suspects):
            journal.begin(key)
            journal.end(key)
    assert not any((tmp_path / JOURNAL_DIR).iterdir())  # all met and ended: nothing left for the next run


def test_a_live_runs_journal_is_left_alone(tmp_path: Path) -> None:
    code = ("import sys\nfrom pathlib import Path\nfrom pipeline.store.crash_journal import CrashJournal\n"
            f"j = CrashJournal.open(Path({str(tmp_path)!r}), 'live')\nj.begin('x:0')\n"
            "print('ready', flush=True)\nsys.stdin.read()\nj.close()\n")
    live = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert live.stdout.readline().strip() == "ready"
        with CrashJournal.open(tmp_path, "other") as journal:
            assert journal.suspects == frozenset()
        assert len(list((tmp_path / JOURNAL_DIR).glob("live.*"))) == 1
    finally:
        live.communicate("", timeout=60)
    # It ended in Python with x:0 begun and not ended (Ctrl-C on a hung page looks like this): kept for the next.
    assert live.returncode == 0
    with CrashJournal.open(tmp_path, "next") as journal:
        assert journal.suspects == {"x:0"}


def test_a_carried_suspect_not_met_is_kept_and_a_clean_run_leaves_nothing(tmp_path: Path) -> None:
    _run_then_die(tmp_path, "dead", begun=["elsewhere:0"], ended=[])
    with CrashJournal.open(tmp_path, "run") as journal:
        journal.begin("here:0")
        journal.end("here:0")
    with CrashJournal.open(tmp_path, "again") as journal:
        assert journal.suspects == {"elsewhere:0"}
        journal.begin("elsewhere:0")
        journal.end("elsewhere:0")
    assert not any((tmp_path / JOURNAL_DIR).iterdir())


def test_a_journal_left_unnamed_by_a_kill_is_removed_once_old_enough(tmp_path: Path) -> None:
    """A run killed between creating `.<name>.new` and naming it leaves an empty file: the next run removes it once
    it is older than a live run's could be; a young one, or one whose process still holds its lock, stays."""
    folder = tmp_path / JOURNAL_DIR
    folder.mkdir()
    old, young, held = (folder / f".{name}.new" for name in ("dead.1", "starting.2", "slow.3"))
    for path in (old, young, held):
        path.touch()
    long_ago = time.time() - PENDING_GRACE_S - 60
    for path in (old, held):
        os.utime(path, (long_ago, long_ago))
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # flock is per open file: the journal's own open of it cannot take this
    try:
        with CrashJournal.open(tmp_path, "next") as journal:
            assert journal.suspects == frozenset()
            assert sorted(folder.iterdir()) == sorted([journal.path, young, held])
    finally:
        os.close(fd)


def test_journal_lines_cut_short_are_ignored() -> None:
    assert unfinished_keys("B a:0\nS b:0\nE a:0\nB\nX d:0\nB c:") == {"b:0"}


def _first_page(sample_dir: Path) -> DocumentRef:
    return next(item for item in Discovery(sample_dir).items() if isinstance(item, DocumentRef))


def test_an_isolated_page_is_prepared_exactly_as_in_the_run(sample_dir: Path) -> None:
    ref, settings = _first_page(sample_dir), PrepareSettings()
    alone, here = prepare_isolated(ref, settings, keep_full=True), prepare_page(ref, settings, keep_full=True)
    assert isinstance(alone, PreparedImage) and isinstance(here, PreparedImage)
    assert np.array_equal(alone.pixels, here.pixels) and np.array_equal(alone.full_pixels, here.full_pixels)
    assert (alone.rotation_applied, alone.skew_corrected, alone.sent_size) == (
        here.rotation_applied, here.skew_corrected, here.sent_size)


def test_a_segfault_or_a_hang_in_the_child_is_a_failure_and_a_bug_is_raised(sample_dir: Path) -> None:
    ref, settings = _first_page(sample_dir), PrepareSettings()
    crashed = prepare_isolated(ref, settings, keep_full=False, prepare=isolation_targets.segfault)
    assert isinstance(crashed, Failure) and crashed.reason == Reason.PREPARE_CRASHED
    assert crashed.stage == "preprocess" and "SIGSEGV" in crashed.detail
    assert (crashed.sha256, crashed.page) == (ref.sha256, ref.page)
    hung = prepare_isolated(ref, settings, keep_full=False, prepare=isolation_targets.hang, timeout_s=5)
    assert isinstance(hung, Failure) and hung.reason == Reason.PREPARE_CRASHED
    assert "no answer within 5 s" in hung.detail
    with pytest.raises(ValueError, match="a bug in idflow"):
        prepare_isolated(ref, settings, keep_full=False, prepare=isolation_targets.bug)


def test_the_engine_prepares_a_suspect_alone_and_the_rest_in_its_threads(sample_dir: Path, tmp_path: Path) -> None:
    refs = [item for item in Discovery(sample_dir).items() if isinstance(item, DocumentRef)][:3]
    _run_then_die(tmp_path, "dead", begun=[refs[1].key], ended=[])

    async def prepare_all() -> tuple[list[PreparedImage | Failure], int]:
        with CrashJournal.open(tmp_path, "run") as journal:
            assert journal.suspects == {refs[1].key}
            async with Engine(Settings(), make_backend(Settings()), journal=journal) as engine:
                outcomes = [o async for o in engine.prepared(refs)]
        return outcomes, engine.isolated

    outcomes, isolated = asyncio.run(prepare_all())
    assert isolated == 1
    by_key = {o.ref.key: o for o in outcomes}
    assert set(by_key) == {r.key for r in refs} and all(isinstance(o, PreparedImage) for o in outcomes)
    expected = prepare_page(refs[1], PrepareSettings(), keep_full=True)
    assert np.array_equal(by_key[refs[1].key].pixels, expected.pixels)
    assert not any((tmp_path / JOURNAL_DIR).iterdir())


def test_a_hung_child_dies_with_a_run_that_is_killed(sample_dir: Path, tmp_path: Path) -> None:
    ref = _first_page(sample_dir)
    code = ("import os, sys\nfrom pathlib import Path\nfrom pipeline.settings import PrepareSettings\n"
            "from pipeline.datamodel import DocumentRef\nfrom pipeline.prepare.isolated import prepare_isolated\n"
            "from tests.support import isolation_targets\n"
            f"ref = DocumentRef(Path({str(ref.path)!r}), {ref.rel_path!r}, {ref.sha256!r})\n"
            "print(os.getpid(), flush=True)\n"
            "prepare_isolated(ref, PrepareSettings(), keep_full=False, prepare=isolation_targets.hang)\n")
    run = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    children = Path(f"/proc/{int(run.stdout.readline())}/task")
    deadline = time.monotonic() + 120
    while not (child := _child_of(children)):
        assert time.monotonic() < deadline and run.poll() is None, "no child process started"
        time.sleep(0.05)
    run.kill()
    run.wait()
    while Path(f"/proc/{child}").exists() and _state(child) != "Z":
        assert time.monotonic() < deadline, "the hung child outlived the killed run"
        time.sleep(0.05)


def _child_of(tasks: Path) -> int | None:
    found = [int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()]
    return found[0] if found else None


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_a_run_id_used_again_takes_over_its_earlier_attempts_journal(tmp_path: Path) -> None:
    # A flow run retried from the Prefect UI keeps its id: its second attempt must not replace the first's journal.
    with CrashJournal.open(tmp_path, "same-run") as first:
        first.begin("hung:0")  # interrupted in Python (Ctrl-C on a hung page): kept for the next run
    with CrashJournal.open(tmp_path, "same-run") as again:
        assert again.suspects == {"hung:0"}
