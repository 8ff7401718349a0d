"""`idflow watch` logic: completion by marker or quiet period, partial files, restart state, no double announce.

The watcher gets a fake emit and (where time matters) a clock offset from real time, so ctime-based quiet
periods are tested without sleeping; one test drives it with real watchfiles in a thread.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from flows.watch import STATE_NAME, UploadWatcher, event_id, run
from pipeline.ingest.inbox import Completion, read_json


class FakeEmit:
    def __init__(self, fail_times: int = 0) -> None:
        self.folders: list[str] = []
        self.fail_times = fail_times

    def __call__(self, folder: Path) -> None:
        if self.fail_times:
            self.fail_times -= 1
            raise ConnectionError("server down")
        self.folders.append(folder.name)


class Clock:
    """Real time plus an adjustable offset (file ctimes are real)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


def upload(root: Path, name: str, files: tuple[str, ...] = ("a.jpg",), marker: bool = False) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    for f in files:
        (folder / f).write_bytes(b"x" * 10)
    if marker:
        (folder / "_READY").touch()
    return folder


def make(root: Path, emit: FakeEmit, quiet: float | None = None, clock: Clock | None = None) -> UploadWatcher:
    return UploadWatcher(root, emit, Completion("_READY", quiet), rescan_seconds=5.0, clock=clock or Clock())


def test_marker_announces_once(tmp_path: Path) -> None:
    emit = FakeEmit()
    w = make(tmp_path, emit)
    folder = upload(tmp_path, "batch-1", marker=True)
    upload(tmp_path, "batch-2")  # no marker, no quiet period: never complete
    w.tick()
    assert emit.folders == ["batch-1"]
    w.on_changes([folder / "late.jpg", folder / "_READY"])
    w.tick()
    w.clock.offset += 60  # type: ignore[attr-defined]
    w.tick()
    assert emit.folders == ["batch-1"]
    assert read_json(tmp_path / STATE_NAME, {})["announced"]["batch-1"]["path"] == str(folder.resolve())


def test_marker_event_announces_without_waiting_for_rescan(tmp_path: Path) -> None:
    emit = FakeEmit()
    w = make(tmp_path, emit)
    w.tick()  # first rescan: empty root
    folder = upload(tmp_path, "b", marker=True)
    w.on_changes([folder / "_READY"])
    assert emit.folders == ["b"]


def test_quiet_period(tmp_path: Path) -> None:
    emit, clock = FakeEmit(), Clock()
    w = make(tmp_path, emit, quiet=30, clock=clock)
    folder = upload(tmp_path, "q")
    w.on_changes([folder / "a.jpg"])
    w.tick()
    assert emit.folders == []
    clock.offset = 20
    w.on_changes([folder / "b.jpg"])  # still changing: the quiet period restarts
    (folder / "b.jpg").write_bytes(b"y")
    clock.offset = 35
    w.tick()
    assert emit.folders == []
    clock.offset = 51
    w.tick()
    assert emit.folders == ["q"]


def test_partial_files_block_quiet_completion(tmp_path: Path) -> None:
    emit, clock = FakeEmit(), Clock()
    w = make(tmp_path, emit, quiet=10, clock=clock)
    folder = upload(tmp_path, "p", files=("a.jpg", "b.jpg.part"))
    clock.offset = 100
    w.tick()
    assert emit.folders == []
    (folder / "b.jpg.part").rename(folder / "b.jpg")
    w.on_changes([folder / "b.jpg"])
    clock.offset = 200
    w.tick()
    assert emit.folders == ["p"]


def test_mtime_preserving_copy_is_not_mistaken_for_old(tmp_path: Path) -> None:
    """rsync -a / cp -p set old mtimes; ctime still says "just now", so the quiet period still applies."""
    import os

    emit = FakeEmit()
    folder = upload(tmp_path, "r")
    old = time.time() - 86400
    os.utime(folder / "a.jpg", (old, old))
    os.utime(folder, (old, old))
    make(tmp_path, emit, quiet=30).tick()
    assert emit.folders == []


def test_hidden_folders_and_loose_files_ignored(tmp_path: Path) -> None:
    emit = FakeEmit()
    w = make(tmp_path, emit, quiet=1)
    upload(tmp_path, ".staging", marker=True)
    (tmp_path / "loose.jpg").write_bytes(b"x")
    w.on_changes([tmp_path / "loose.jpg", tmp_path / ".staging" / "_READY"])
    w.clock.offset = 100  # type: ignore[attr-defined]
    w.tick()
    assert emit.folders == []


def test_restart_keeps_state_and_catches_folders_created_while_stopped(tmp_path: Path) -> None:
    emit = FakeEmit()
    upload(tmp_path, "one", marker=True)
    make(tmp_path, emit).tick()
    upload(tmp_path, "two", marker=True)  # lands while the watcher is down
    again = FakeEmit()
    make(tmp_path, again).tick()
    assert emit.folders == ["one"] and again.folders == ["two"]
    third = FakeEmit()
    make(tmp_path, third).tick()
    assert third.folders == []


def test_failed_emit_is_retried_and_not_recorded(tmp_path: Path) -> None:
    emit, clock = FakeEmit(fail_times=1), Clock()
    w = make(tmp_path, emit, clock=clock)
    upload(tmp_path, "f", marker=True)
    w.tick()
    assert emit.folders == [] and not (tmp_path / STATE_NAME).exists()
    clock.offset = 6  # after the retry delay (= rescan interval)
    w.tick()
    assert emit.folders == ["f"]


def test_event_id_and_reference_are_stable_per_folder_and_hold_no_part_of_its_name(tmp_path: Path) -> None:
    from pipeline.ingest import sources

    out = tmp_path / "out"
    x, y = tmp_path / "scans_320106197701013454", tmp_path / "y"
    ref = sources.folder_reference(out, x)
    assert ref == sources.folder_reference(out, x) != sources.folder_reference(out, y)
    assert event_id(ref) == event_id(sources.folder_reference(out, x)) != event_id(sources.folder_reference(out, y))
    assert "3201" not in ref and "scans" not in ref and sources.resolve(out, ref) == x.resolve()
    # keyed with OUT's own key: the same folder under another OUT has another reference
    assert sources.folder_reference(tmp_path / "other", x) != ref
    with pytest.raises(ValueError, match="is not in"):
        sources.resolve(tmp_path / "other", ref.replace(ref[-4:], "0000"))


@pytest.mark.timeout(60)
def test_real_watchfiles_announces_once(tmp_path: Path) -> None:
    emit = FakeEmit()
    root = tmp_path / "inbox"
    root.mkdir()
    upload(root, "before-start", marker=True)
    with watching(UploadWatcher(root, emit, Completion("_READY", None), rescan_seconds=3600)):
        _wait(lambda: emit.folders == ["before-start"])
        folder = upload(root, "live", files=("a.jpg", "b.jpg.part"))
        time.sleep(1.0)
        assert emit.folders == ["before-start"]  # no marker yet
        (folder / "b.jpg.part").rename(folder / "b.jpg")
        (folder / "_READY").touch()
        _wait(lambda: "live" in emit.folders)
        (folder / "c.jpg").write_bytes(b"late")
        time.sleep(1.0)
    assert emit.folders == ["before-start", "live"]


@contextmanager
def watching(watcher: UploadWatcher) -> Iterator[None]:
    """`run(watcher)` in a thread for the duration of the block, stopped and joined after it."""
    stop = threading.Event()
    thread = threading.Thread(target=run, args=(watcher,), kwargs={"tick_seconds": 0.2, "stop_event": stop})
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def _wait(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.timeout(60)
def test_a_folder_name_that_is_not_utf8_stops_neither_the_watch_nor_other_folders(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # watchfiles cannot decode such a path and gives up on the whole root; the watcher rescans instead
    emit = FakeEmit()
    root = tmp_path / "inbox"
    root.mkdir()
    odd = Path(os.fsdecode(bytes(root) + b"/batch-\xff\xfe"))
    upload(root, odd.name, marker=True)
    upload(root, "batch-ok", marker=True)
    with watching(UploadWatcher(root, emit, Completion("_READY", None), rescan_seconds=0.2)):
        _wait(lambda: emit.folders == ["batch-ok"])
        late = upload(root, "batch-late", marker=True)
        _wait(lambda: late.name in emit.folders)
    assert emit.folders == ["batch-ok", "batch-late"]
    said = [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()]
    assert len(said) == 1, said  # once, not at every rescan
