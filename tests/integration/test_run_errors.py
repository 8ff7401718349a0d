"""When the run itself cannot go on, the console says so in one line: real `idflow run` processes on one OUT,
OUT on a full tmpfs and on a read-only bind mount, a base URL that is not a URL. Each test also checks that no
document was lost or stored twice, and the concurrent runs that no Failed flow run was left in Prefect.

The file-system tests mount (tmpfs, bind mounts), which needs root: the test says so when it cannot.

Runs whose subject is not Prefect's server use the session's (`prefect_api`): a local server started for each
run costs 15-30 s and is tested in test_prefect_background.py. The concurrent runs keep a local server of their
own, whose database shows the flow runs they left."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipeline.ingest.discover import Discovery
from pipeline.review.failure_queue import current_failures
from pipeline.store.output_lock import OutputBusy, hold_output
from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.idflow_process import idflow, no_server_left, run_env, unique_scans
from tests.support.prefect_server import wait_for

KEY = "sk-errors-5d1c9e7a3b8f2640"


def _env(tmp: Path, chat: ChatServer, **extra: str) -> dict[str, str]:
    """A run through the loopback model; the embedded second reading is off (this file is about errors)."""
    return run_env(tmp, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                   TAOTOKEN_BASE_URL=chat.base_url, IDFLOW_OPENAI_CROSSCHECK="false", **extra)


def _api_env(tmp: Path, api: str, chat: ChatServer | None = None, **extra: str) -> dict[str, str]:
    """A run's environment on the session's Prefect API (no local server started)."""
    return _env(tmp, chat, PREFECT_API_URL=api, **extra) if chat else run_env(tmp, PREFECT_API_URL=api, **extra)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def _stored(out: Path, table: str) -> list[dict]:
    return [row for part in sorted((out / table).rglob("part-*.parquet")) for row in pq.read_table(part).to_pylist()]


def _once_each(out: Path, names: set[str]) -> None:
    """Every document has exactly one result or failure row over all runs, and no temp part is left."""
    paths = [r["source_path"] for r in _stored(out, "results") + _stored(out, "failures")]
    assert sorted(paths) == sorted(names)
    assert not list(out.rglob(".part-*.tmp"))


def test_concurrent_runs_on_one_output_refuse_in_one_line_and_leave_no_failed_flow_run(tmp_path: Path) -> None:
    runs = 3  # one wins, two are refused (two refused at once is the case a lone loser would not show)
    scans = unique_scans(tmp_path / "in", 4)
    out = tmp_path / "out"
    answers = threading.Event()  # the winner's requests wait until every other run has been refused
    with ChatServer(ServerConfig(api_key=KEY, hold=answers)) as chat:
        env = _env(tmp_path, chat)
        procs = [idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / f"run{i}.log")
                 for i in range(runs)]
        try:
            wait_for(lambda: sum(p.poll() is not None for p in procs) == runs - 1, 300,
                     "all runs but one to be refused", every=0.2)
        finally:
            answers.set()
        codes = [p.wait(timeout=600) for p in procs]
    logs = [(tmp_path / f"run{i}.log").read_text(errors="replace") for i in range(runs)]
    assert sorted(codes) == [0] + [2] * (runs - 1), logs
    for code, log in zip(codes, logs, strict=True):
        assert "Traceback" not in log, log
        if code == 2:
            assert len(_lines(log)) == 1, log
            assert "is being written by" in log and "--wait" in log, log
    no_server_left(tmp_path / "prefect-home")
    with sqlite3.connect(tmp_path / "prefect-home" / "prefect.db") as db:
        states = [s for (s,) in db.execute("SELECT state_type FROM flow_run")]
    assert states == ["COMPLETED"]  # the refused runs never started a flow run
    _once_each(out, {p.name for p in scans.iterdir()})


def test_a_hold_lends_itself_to_one_hold_below_it_only() -> None:
    """The command's hold is re-entered by the one run session of its flow; a second hold at the same time (another
    flow of the process) is refused like any other run."""
    import tempfile

    async def go(out: Path) -> list[str]:
        told: list[str] = []
        async with hold_output(out, run_id="command", wait=False, lend=True):
            async with hold_output(out, run_id="flow", wait=False):
                assert "flow" in (out / ".idflow.lock.owner.json").read_text()
                with contextlib.suppress(OutputBusy):
                    async with hold_output(out, run_id="other", wait=False):
                        told.append("entered")
                told.append("refused")
        return told

    with tempfile.TemporaryDirectory() as tmp:
        assert asyncio.run(go(Path(tmp))) == ["refused"]


@contextlib.contextmanager
def _mounted(*commands: list[str], target: Path) -> Iterator[None]:
    target.mkdir(parents=True, exist_ok=True)
    try:
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                pytest.fail(f"{' '.join(command)} failed (this test mounts file systems, which needs root): "
                            f"{done.stderr.strip()}")
        yield
    finally:
        subprocess.run(["umount", str(target)], capture_output=True)


def _fill(folder: Path, leave_bytes: int) -> Path:
    """A file taking all of `folder`'s file system but `leave_bytes`."""
    st = os.statvfs(folder)
    filler = folder / "filler.bin"
    with filler.open("wb") as fh:
        fh.truncate(0)
        fh.write(b"\0" * max(st.f_bavail * st.f_frsize - leave_bytes, 0))
    return filler


def test_a_full_disk_while_parts_are_written_is_one_line_and_a_rerun_after_freeing_space_completes(
        tmp_path: Path, prefect_api: str) -> None:
    scans = unique_scans(tmp_path / "in", 24)
    disk = tmp_path / "disk"
    out = disk / "out"
    with _mounted(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], target=disk), \
            ChatServer(ServerConfig(api_key=KEY)) as chat:
        out.mkdir()
        filler = _fill(disk, 96 * 1024)  # room for a few parts of 2 documents, not for 24 documents
        env = _api_env(tmp_path, prefect_api, chat, IDFLOW_FLUSH_EVERY="2")
        first = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "full.log")
        code = first.wait(timeout=600)
        console = (tmp_path / "full.log").read_text(errors="replace")
        assert code == 2, console
        assert "Traceback" not in console, console
        errors = [line for line in _lines(console) if "error" in line.lower()]
        assert len(errors) == 1 and errors == [_lines(console)[-1]], console
        line = errors[0]
        assert "No space left on device" in line and str(out) in line and "free space and run again" in line
        stored = len(_stored(out, "results")) + len(_stored(out, "failures"))
        assert 0 < stored < 24 and f"{stored} of its" in line, (stored, line)
        assert "idflow-errors.log" in line
        assert "Traceback" in (tmp_path / "prefect-home" / "idflow-errors.log").read_text()
        assert not list(out.rglob(".part-*.tmp"))

        filler.unlink()
        again = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "again.log")
        assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text(errors="replace")
        _once_each(out, {p.name for p in scans.iterdir()})


def test_a_read_only_output_is_one_line(tmp_path: Path, prefect_api: str) -> None:
    scans = unique_scans(tmp_path / "in", 2)
    source, out = tmp_path / "ro-source", tmp_path / "out"
    source.mkdir()
    with _mounted(["mount", "--bind", str(source), str(out)], ["mount", "-o", "remount,bind,ro", str(out)],
                  target=out), ChatServer(ServerConfig(api_key=KEY)) as chat:
        proc = idflow("run", str(scans), "--out", str(out), env=_api_env(tmp_path, prefect_api, chat), cwd=tmp_path,
                      log=tmp_path / "ro.log")
        code = proc.wait(timeout=600)
        requests = len(chat.chat_requests())
    console = (tmp_path / "ro.log").read_text(errors="replace")
    assert code == 2, console
    assert "Traceback" not in console and len(_lines(console)) == 1, console
    assert str(out) in console and "Read-only file system" in console
    assert requests == 0 and not list(source.iterdir())


def _parts(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_an_output_made_read_only_or_full_after_a_first_run_is_one_line_and_keeps_its_parts(
        tmp_path: Path, prefect_api: str, how: str) -> None:
    """The lock file exists then (the first run made it): opening it for writing is what fails, at the command's
    look before Prefect starts (read-only) or at the owner note (full), whichever `filelock` is installed."""
    scans = unique_scans(tmp_path / "in", 2)
    disk, env = tmp_path / "disk", _api_env(tmp_path, prefect_api, IDFLOW_BACKEND="ocr")
    out = disk / "out"
    with _mounted(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], target=disk):
        first = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "first.log")
        assert first.wait(timeout=600) == 0, (tmp_path / "first.log").read_text(errors="replace")
        assert (out / ".idflow.lock").is_file()
        before = _parts(out)
        assert before
        unique_scans(tmp_path / "in", 4)  # two new documents for the second run
        if how == "read-only":
            stack = _mounted(["mount", "--bind", str(out), str(out)], ["mount", "-o", "remount,bind,ro", str(out)],
                             target=out)
            expected = "Read-only file system"
        else:
            _fill(disk, 0)
            stack = contextlib.nullcontext()
            expected = "No space left on device"
        with stack:
            again = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "again.log")
            code = again.wait(timeout=600)
            console = (tmp_path / "again.log").read_text(errors="replace")
            assert code == 2, console
            assert "Traceback" not in console and len(_lines(console)) == 1, console
            assert expected in console and str(out) in console, console
            assert _parts(out) == before  # the first run's parts intact, nothing half-written beside them
            assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize("url", ["not a url", "ftp//host/api", "http://"])
def test_a_base_url_that_is_not_an_http_url_is_refused_before_any_document(tmp_path: Path, url: str) -> None:
    scans = unique_scans(tmp_path / "in", 2)
    with ChatServer(ServerConfig(api_key=KEY)) as chat:
        env = {**_env(tmp_path, chat), "TAOTOKEN_BASE_URL": url}
        proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "url.log")
        code = proc.wait(timeout=300)
        requests = len(chat.chat_requests())
    console = (tmp_path / "url.log").read_text(errors="replace")
    assert code == 2 and len(_lines(console)) == 1 and "TAOTOKEN_BASE_URL" in console, console
    assert "http(s) URL with a host" in console and url not in console.replace("TAOTOKEN_BASE_URL", "")
    assert requests == 0 and not (tmp_path / "out").exists()


def test_concurrency_out_of_range_is_refused_with_its_range(tmp_path: Path) -> None:
    scans = unique_scans(tmp_path / "in", 1)
    with ChatServer(ServerConfig(api_key=KEY)) as chat:
        proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), "--concurrency", "300",
                      env=_env(tmp_path, chat), cwd=tmp_path, log=tmp_path / "c.log")
        code = proc.wait(timeout=300)
    console = (tmp_path / "c.log").read_text(errors="replace")
    assert code == 2 and len(_lines(console)) == 1 and "range 1-256" in console, console


def test_a_sigterm_in_the_first_second_ends_with_the_usual_line(tmp_path: Path) -> None:
    scans = unique_scans(tmp_path / "in", 1)
    log = tmp_path / "term.log"
    proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), env=run_env(tmp_path), cwd=tmp_path, log=log)
    # the moment the command catches SIGTERM (the kernel's SigCgt mask), long before the CLI is imported
    wait_for(lambda: proc.poll() is not None or _catches_sigterm(proc.pid), 30, "the SIGTERM handler",
             every=0.001)
    proc.terminate()
    assert proc.wait(timeout=60) == 143, log.read_text()
    assert _lines(log.read_text()) == ["stopped by signal 15: documents finished so far are stored; run the same "
                                       "command again to do the rest"]


def _catches_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    return False


def test_empty_files_are_a_failure_each_in_discovery_and_in_the_failure_queue(tmp_path: Path) -> None:
    scans = tmp_path / "in"
    scans.mkdir()
    for i in range(500):
        (scans / f"upload_{i:03d}.jpg").write_bytes(b"")
    items = list(Discovery(scans).items())
    assert len(items) == 500 and {type(i).__name__ for i in items} == {"Failure"}
    assert {i.reason for i in items} == {"empty_file"} and len({i.rel_path for i in items}) == 500

    from pipeline.store.parquet import FAILURE_SCHEMA, RunWriter

    writer = RunWriter(tmp_path / "out", "r1", "fp", flush_every=1000)
    for item in items:
        writer.add(item)
    writer.flush()
    queue = current_failures(tmp_path / "out").to_pylist()
    assert sorted(r["source_path"] for r in queue) == sorted(f"upload_{i:03d}.jpg" for i in range(500))
    assert {r["attempts"] for r in queue} == {1} and FAILURE_SCHEMA.names[0] == "source_path"


def _noisy_scans(folder: Path, count: int) -> Path:
    """`count` scans of random noise: their review thumbnails are as large as a JPEG of that size gets, so the
    review page of `count` documents is many times the size of their Parquet rows."""
    from PIL import Image

    folder.mkdir(parents=True)
    for i in range(count):
        Image.frombytes("RGB", (640, 416), os.urandom(640 * 416 * 3)).save(folder / f"scan_{i:04d}.png")
    return folder


def test_a_full_disk_while_the_review_page_is_written_is_one_line_and_the_next_run_writes_the_page(
        tmp_path: Path, prefect_api: str) -> None:
    scans = _noisy_scans(tmp_path / "in", 8)
    disk = tmp_path / "disk"
    out = disk / "out"
    # a model's answer has no measured confidence: each of the 8 results is on the review page
    with _mounted(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], target=disk), \
            ChatServer(ServerConfig(api_key=KEY)) as chat:
        out.mkdir()
        filler = _fill(disk, 256 * 1024)  # room for the parts, the summary and the lock; not for the page
        env = _api_env(tmp_path, prefect_api, chat)
        first = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "full.log")
        code = first.wait(timeout=600)
        console = (tmp_path / "full.log").read_text(errors="replace")
        assert code == 2, console
        assert "Traceback" not in console, console
        errors = [line for line in _lines(console) if "error" in line.lower()]
        assert len(errors) == 1 and errors == [_lines(console)[-1]], console
        line = errors[0]
        assert "No space left on device" in line and str(out / "review") in line, line
        assert "all of its 8 results and 0 failures" in line and "review page" in line, line
        assert "free space and run again" in line and "idflow-errors.log" in line, line
        assert "Traceback" in (tmp_path / "prefect-home" / "idflow-errors.log").read_text()
        assert not [p for p in out.rglob("*.tmp")], list(out.rglob("*"))
        (summary,) = (out / "runs").glob("*.json")
        first_run = summary.stem
        assert not (out / "review" / f"{first_run}.html").exists()
        _once_each(out, {p.name for p in scans.iterdir()})  # every document stored before the page
        asked = len(chat.chat_requests())

        filler.unlink()
        again = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "again.log")
        assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text(errors="replace")
        page = (out / "review" / f"{first_run}.html").read_text(encoding="utf-8")
        assert page.count("data:image/jpeg;base64,") >= 8  # the first run's page, every result in it
        _once_each(out, {p.name for p in scans.iterdir()})  # nothing read again, nothing stored twice
        assert len(chat.chat_requests()) == asked  # the second run sent nothing


def test_a_base_url_that_is_not_an_http_url_leaves_an_ocr_run_alone(tmp_path: Path, prefect_api: str) -> None:
    """The OCR calls no endpoint: a mistyped TaoToken URL in the environment (or .env) does not stop it."""
    scans = unique_scans(tmp_path / "in", 2)
    out = tmp_path / "out"
    env = _api_env(tmp_path, prefect_api, IDFLOW_BACKEND="ocr", TAOTOKEN_BASE_URL="not a url",
                   IDFLOW_OPENAI_BASE_URL="ftp//x")
    proc = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "ocr.log")
    code = proc.wait(timeout=600)
    console = (tmp_path / "ocr.log").read_text(errors="replace")
    assert code == 0 and "Traceback" not in console and "configuration error" not in console, console
    assert "seen = results + failures + skipped: yes" in console
    _once_each(out, {p.name for p in scans.iterdir()})


def test_a_temp_part_a_stopped_run_left_is_removed_by_the_next_run(tmp_path: Path, prefect_api: str) -> None:
    """A run killed between writing a part's temp file and renaming it (its lock is gone with it) leaves the temp
    file; the next `idflow run` on OUT removes it, however young, and stores every document once."""
    scans = unique_scans(tmp_path / "in", 2)
    out = tmp_path / "out"
    left = out / "results" / "run_date=2026-12-01" / ".part-killed-00000.parquet.5e1c.tmp"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"PAR1 half a part")
    with ChatServer(ServerConfig(api_key=KEY)) as chat:
        proc = idflow("run", str(scans), "--out", str(out), env=_api_env(tmp_path, prefect_api, chat),
                      cwd=tmp_path, log=tmp_path / "next.log")
        code = proc.wait(timeout=600)
    console = (tmp_path / "next.log").read_text(errors="replace")
    assert code == 0 and "Traceback" not in console, console
    assert not left.exists()
    _once_each(out, {p.name for p in scans.iterdir()})


def test_empty_uploads_are_each_listed_by_a_real_run(tmp_path: Path, prefect_api: str) -> None:
    """Empty files have identical (no) content, yet each is its own `empty_file` failure in the run's counts and
    in the failure queue, so a person asking which uploads were empty sees every one."""
    scans = tmp_path / "in"
    scans.mkdir()
    for i in range(40):
        (scans / f"upload_{i:03d}.jpg").write_bytes(b"")
    out = tmp_path / "out"
    proc = idflow("run", str(scans), "--out", str(out), env=_api_env(tmp_path, prefect_api), cwd=tmp_path,
                  log=tmp_path / "e.log")
    code = proc.wait(timeout=600)
    console = (tmp_path / "e.log").read_text(errors="replace")
    assert code == 0 and "Traceback" not in console, console
    assert "failure empty_file: 40" in console and "duplicate_content" not in console, console
    assert sorted(r["source_path"] for r in current_failures(out).to_pylist()) == sorted(
        p.name for p in scans.iterdir())
    _once_each(out, {p.name for p in scans.iterdir()})
