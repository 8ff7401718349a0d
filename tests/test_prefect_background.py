"""Prefect in the background of a plain `idflow run` (no PREFECT_API_URL): real `idflow` processes that start
their own temporary Prefect server.

- a run on a saturated CPU still succeeds (Prefect's own ephemeral server gives up after 20 s), prints no
  concurrency-limit warning, and stops its server;
- a run killed with SIGTERM or SIGKILL leaves no server process behind;
- a server that cannot be ready in time fails the run with one line naming the setting to change.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.idflow_process import REPO, idflow, prefect_servers, run_env, unique_scans
from tests.support.prefect_server import wait_for

KEY = "sk-background-7f3e9a1c5b2d"


@contextmanager
def saturated_cpu() -> Iterator[None]:
    """One busy-loop process per core for the duration of the block."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        yield
    finally:
        for proc in loops:
            proc.kill()
            proc.wait()


def test_run_on_a_saturated_cpu_succeeds_quietly_and_stops_its_server(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("cn_front.jpg", "id_card_td1.jpg"):
        (folder / name).write_bytes((REPO / "data" / "sample" / name).read_bytes())
    env = run_env(tmp_path)
    with saturated_cpu():
        proc = idflow("run", str(folder), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        code = proc.wait(timeout=900)
    output = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 0, output[-3000:]
    assert "seen = results + failures + skipped: yes" in output
    assert "do not exist" not in output and "skipping acquisition" not in output, output[-3000:]
    assert "Traceback" not in output
    assert prefect_servers(tmp_path / "prefect-home") == []
    assert (tmp_path / "prefect-home" / "prefect.db").is_file()  # the run did use a server of its own


# SIGTERM: Prefect's handler raises TerminationSignal in whichever coroutine runs, often one of the engine's
# worker tasks; the engine re-raises a stage's own failure in the run loop, so the run stops.
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_killed_run_leaves_no_prefect_server(tmp_path: Path, sig: signal.Signals) -> None:
    scans = unique_scans(tmp_path / "in", 400)
    with ChatServer(ServerConfig(api_key=KEY, latency_s=0.3, max_concurrency=1)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url, IDFLOW_FLUSH_EVERY="1", IDFLOW_BATCH_SIZE="1",
                      IDFLOW_CONCURRENCY="1")
        proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        try:
            # The first Parquet part: the flow is running on the run's own server, with most pages to go.
            wait_for(lambda: any((tmp_path / "out").rglob("*.parquet")) or proc.poll() is not None, 900,
                     "the first Parquet part", every=0.2)
            assert proc.poll() is None, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
            servers = prefect_servers(tmp_path / "prefect-home")
            assert len(servers) == 1, servers
            os.kill(proc.pid, sig)
            code = proc.wait(timeout=120)  # SIGTERM: Prefect marks the flow run Crashed first, then it stops
            assert code != 0, "the run finished all its pages instead of stopping"
            if sig == signal.SIGTERM:  # one line and the shell's code for it, not a traceback
                output = (tmp_path / "run.log").read_text(errors="replace")
                assert code == 128 + signal.SIGTERM and "stopped by signal 15" in output, output[-3000:]
                assert "Traceback" not in output, output[-3000:]
            wait_for(lambda: prefect_servers(tmp_path / "prefect-home") == [], 30, "the server to go", every=0.2)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for pid in prefect_servers(tmp_path / "prefect-home"):  # never leave one behind, even on failure
                os.kill(pid, signal.SIGKILL)


def test_server_not_ready_in_time_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    env = run_env(tmp_path, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1")  # the user's own choice wins
    proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                  log=tmp_path / "run.log")
    assert proc.wait(timeout=600) == 3
    output = (tmp_path / "run.log").read_text(errors="replace")
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not ready after 1 s" in lines[0], output
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in lines[0] and "PREFECT_API_URL" in lines[0]
    assert prefect_servers(tmp_path / "prefect-home") == []


def test_a_configured_api_that_does_not_answer_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    env = run_env(tmp_path, PREFECT_API_URL=f"http://127.0.0.1:{port}/api")
    proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                  log=tmp_path / "run.log")
    assert proc.wait(timeout=600) == 3
    output = (tmp_path / "run.log").read_text(errors="replace")
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}/api does not answer" in lines[0], output
    assert "unset PREFECT_API_URL" in lines[0]
    assert not (tmp_path / "out" / "results").exists()


def test_api_url_from_the_active_profile_means_no_temporary_server(tmp_path: Path) -> None:
    """What `prefect config set PREFECT_API_URL=...` writes is honoured before Prefect is even imported."""
    home = tmp_path / "prefect-home"
    home.mkdir()
    (home / "profiles.toml").write_text('active = "ops"\n\n[profiles.ops]\n'
                                        'PREFECT_API_URL = "http://127.0.0.1:4200/api"\n\n[profiles.other]\n')
    code = ("import sys; from flows.local_server import configured_api_url; print(configured_api_url()); "
            "print('prefect' in sys.modules)")

    def ask(**extra: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", code], env=run_env(tmp_path, **extra), capture_output=True,
                              text=True, check=True, timeout=120).stdout.split()

    assert ask() == ["http://127.0.0.1:4200/api", "False"]
    assert ask(PREFECT_PROFILE="other") == ["None", "False"]
    assert ask(PREFECT_API_URL="http://127.0.0.1:9/api") == ["http://127.0.0.1:9/api", "False"]
