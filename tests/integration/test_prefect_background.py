"""Prefect in the background of a plain `idflow run` (no PREFECT_API_URL): real `idflow` processes that start or
join the local Prefect server (`run_env` gives it no idle time unless a test says otherwise).

- a run on a saturated CPU still succeeds (Prefect's own ephemeral server gives up after 20 s), prints no
  concurrency-limit warning, and its server stops once the run ends;
- a run killed with SIGTERM or SIGKILL lets go of the server, which then stops;
- a server that cannot be ready in time fails the run with one line naming the setting to change;
- runs share one server while it is up, and `idflow stop-server` stops it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.idflow_process import REPO, idflow, no_server_left, prefect_servers, run_env, unique_scans
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
    """The subject is the server's start and use under load, not the reader: the pages go to a loopback model
    (the embedded reader loading and reading them on the busy cores added half a minute and proved nothing
    more; its runs are tested elsewhere)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("cn_front.jpg", "id_card_td1.jpg"):
        (folder / name).write_bytes((REPO / "data" / "sample" / name).read_bytes())
    with saturated_cpu(), ChatServer(ServerConfig(api_key=KEY)) as chat:
        # an empty database: the slowest start there is, on the busy cores
        env = run_env(tmp_path, set_up_database=False, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY,
                      TAOTOKEN_MODEL="test-vlm", TAOTOKEN_BASE_URL=chat.base_url)
        proc = idflow("run", str(folder), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        code = proc.wait(timeout=900)
        asked = len(chat.chat_requests())
    output = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 0, output[-3000:]
    assert "seen = results + failures + skipped: yes" in output and asked >= 2, output[-3000:]
    assert "do not exist" not in output and "skipping acquisition" not in output, output[-3000:]
    assert "Traceback" not in output
    no_server_left(tmp_path / "prefect-home")
    assert (tmp_path / "prefect-home" / "prefect.db").is_file()  # the run's own server made its database


# SIGTERM: the flow body is cancelled at its await (flows/sigterm.py) and ends with TerminationSignal; the engine's
# stages unwind, the run's parts are flushed and Prefect marks the run Crashed. SIGKILL: nothing of the run is left
# to say so; the next run on the machine marks it Crashed (flows/run_lease.py).
def test_killed_runs_leave_no_prefect_server(tmp_path: Path) -> None:
    """A run stopped by SIGTERM, then one killed by SIGKILL, in one Prefect home: each lets go of its server, which
    stops; a later run finds the first marked Crashed by itself and marks the second."""
    with ChatServer(ServerConfig(api_key=KEY, latency_s=0.3, max_concurrency=1)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url, IDFLOW_FLUSH_EVERY="1", IDFLOW_BATCH_SIZE="1",
                      IDFLOW_CONCURRENCY="1")
        for name, sig in (("term", signal.SIGTERM), ("kill", signal.SIGKILL)):
            _kill_a_run(tmp_path, env, name, sig)
    after = _run_after_a_kill(tmp_path, env)
    states = {run["name"]: run["state_type"] for run in _flow_runs(tmp_path / "prefect-home")}
    assert states == {"extract term (400 files)": "CRASHED", "extract kill (400 files)": "CRASHED",
                      "extract empty (0 files)": "COMPLETED"}, states
    assert "'extract kill (400 files)' marked Crashed" in after, after[-3000:]
    assert "'extract term (400 files)' marked Crashed" not in after, after[-3000:]  # it said so itself
    assert not any((tmp_path / "prefect-home" / "idflow-runs").iterdir())  # every lease gone


def _kill_a_run(tmp_path: Path, env: dict[str, str], name: str, sig: signal.Signals) -> None:
    """`idflow run` on 400 scans in folder `name`, sent `sig` once its first Parquet part is stored: it stops
    short of its pages and leaves no server behind."""
    scans = unique_scans(tmp_path / name, 400)
    out, log = tmp_path / f"out-{name}", tmp_path / f"{name}.log"
    proc = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=log)
    try:
        # The first Parquet part: the flow is running on the run's own server, with most pages to go.
        wait_for(lambda: any(out.rglob("*.parquet")) or proc.poll() is not None, 900, "the first Parquet part",
                 every=0.2)
        assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
        servers = prefect_servers(tmp_path / "prefect-home")
        assert len(servers) == 1, servers
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=120)  # SIGTERM: Prefect marks the flow run Crashed first, then it stops
        assert code != 0, "the run finished all its pages instead of stopping"
        if sig == signal.SIGTERM:  # one line and the shell's code for it, not a traceback
            output = log.read_text(errors="replace")
            assert code == 128 + signal.SIGTERM and "stopped by signal 15" in output, output[-3000:]
            assert "Traceback" not in output, output[-3000:]
        no_server_left(tmp_path / "prefect-home")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in prefect_servers(tmp_path / "prefect-home"):  # never leave one behind, even on failure
            os.kill(pid, signal.SIGKILL)


def _run_after_a_kill(tmp_path: Path, env: dict[str, str]) -> str:
    """`idflow run` on an empty folder, its server left up for `_flow_runs`; its output."""
    (tmp_path / "empty").mkdir()
    env = {**env, "IDFLOW_PREFECT_SERVER_IDLE_S": "300"}
    proc = idflow("run", str(tmp_path / "empty"), "--out", str(tmp_path / "out2"), env=env, cwd=tmp_path,
                  log=tmp_path / "after.log")
    output = (tmp_path / "after.log").read_text(errors="replace") if proc.wait(timeout=600) == 0 else ""
    assert output, (tmp_path / "after.log").read_text(errors="replace")[-3000:]
    return output


def _flow_runs(home: Path) -> list[dict]:
    """Every flow run the local server of `home` knows, then that server stopped."""
    (state,) = home.glob("idflow-server/*/state.json")
    port = json.loads(state.read_text())["port"]
    try:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/api/flow_runs/filter", data=b"{}",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=30) as answer:
            return json.loads(answer.read())
    finally:
        _stop_server(run_env(home.parent), home.parent, "--force")
        no_server_left(home)


def test_server_not_ready_in_time_is_one_clear_line(tmp_path: Path) -> None:
    """The server's database accepts connections and never answers: the server is up and never ready, on any
    machine (with its own database a quick one is ready within the 1 s set here)."""
    (tmp_path / "in").mkdir()
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        database = f"postgresql+asyncpg://idflow:idflow@127.0.0.1:{silent.getsockname()[1]}/prefect"
        env = run_env(tmp_path, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="1",  # the user's own choice wins
                      PREFECT_SERVER_DATABASE_CONNECTION_URL=database)
        proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        code = proc.wait(timeout=600)
    assert code == 3
    output = (tmp_path / "run.log").read_text(errors="replace")
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and "not ready after 1 s" in lines[0], output
    assert "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in lines[0] and "PREFECT_API_URL" in lines[0]
    no_server_left(tmp_path / "prefect-home")


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


def _environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_runs_share_one_local_server_until_it_is_stopped(tmp_path: Path) -> None:
    """Two runs started together start one server; a later run joins it (the fixed cost of a run is then its own
    imports); the server holds no key; `idflow stop-server` stops it; a server that died leaves a state the next
    run does not trust."""
    home = tmp_path / "prefect-home"
    (tmp_path / "in").mkdir()
    env = run_env(tmp_path, IDFLOW_PREFECT_SERVER_IDLE_S="600", TAOTOKEN_API_KEY=KEY)

    def run(name: str) -> subprocess.Popen[bytes]:
        return idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / name), env=env, cwd=tmp_path,
                      log=tmp_path / f"{name}.log")

    def finished(proc: subprocess.Popen[bytes], name: str) -> None:
        assert proc.wait(timeout=900) == 0, (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]

    try:
        together = {name: run(name) for name in ("a", "b")}
        for name, proc in together.items():
            finished(proc, name)
        servers = prefect_servers(home)
        assert len(servers) == 1, servers
        assert KEY.encode() not in _environ(servers[0])

        finished(run("c"), "c")
        assert prefect_servers(home) == servers

        os.kill(servers[0], signal.SIGKILL)  # its state file stays behind, naming a dead process
        wait_for(lambda: prefect_servers(home) == [], 60, "the killed server to go", every=0.2)
        finished(run("d"), "d")
        replacement = prefect_servers(home)
        assert len(replacement) == 1 and replacement != servers

        stop = subprocess.run([sys.executable, "-m", "idflow", "stop-server"], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
        assert stop.returncode == 0 and f"pid {replacement[0]}" in stop.stdout, stop.stdout + stop.stderr
        no_server_left(home)
        again = subprocess.run([sys.executable, "-m", "idflow", "stop-server"], env=env, cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and "no local Prefect server runs" in again.stdout, again.stdout
    finally:
        for pid in prefect_servers(home):
            os.kill(pid, signal.SIGKILL)


def test_a_bad_idle_time_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    env = run_env(tmp_path, IDFLOW_PREFECT_SERVER_IDLE_S="ten minutes")
    proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                  log=tmp_path / "run.log")
    assert proc.wait(timeout=600) == 2  # a setting, refused with the others before any server is touched
    lines = [line for line in (tmp_path / "run.log").read_text(errors="replace").splitlines() if line.strip()]
    assert lines == ["configuration error: prefect_server_idle_s: Input should be a valid number, unable to parse "
                     "string as a number (at least 0)"], lines
    assert prefect_servers(tmp_path / "prefect-home") == []


STOPPED_IN_A_CALLBACK = """
import asyncio, signal, sys
import typer
from prefect import flow
from flows.sigterm import stops_on_sigterm
from idflow.common import prefect_api, stopped_by_signal

@flow(name="stopped-in-a-callback")
@stops_on_sigterm
async def stopped_in_a_callback() -> None:
    # The signal lands while the loop runs a plain callback, as it does while a socket's data is handed over:
    # asyncio drops whatever a callback raises, so a handler that raised there let the flow sleep on.
    asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGTERM)
    try:
        await asyncio.sleep(30)
    finally:
        print("unwound", flush=True)
    print("finished", flush=True)

try:
    with prefect_api() as ready:
        ready()
        with stopped_by_signal("nothing was lost"):
            asyncio.run(stopped_in_a_callback())
except typer.Exit as exc:
    sys.exit(exc.exit_code)
"""


def test_sigterm_landing_in_an_event_loop_callback_stops_the_flow_at_its_await(tmp_path: Path) -> None:
    """The flow ends with one line and exit 143, not by the default handler Prefect restores and signals again once
    the run has crashed."""
    done = subprocess.run([sys.executable, "-c", STOPPED_IN_A_CALLBACK], env=run_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 128 + signal.SIGTERM, done.stdout[-3000:] + done.stderr[-3000:]
    assert "unwound" in done.stdout and "finished" not in done.stdout, done.stdout[-3000:]
    assert "stopped by signal 15: nothing was lost" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr and "Exception in callback" not in done.stderr


def test_a_prefect_home_that_cannot_hold_the_server_files_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "a-file").write_text("not a folder")
    env = run_env(tmp_path, PREFECT_HOME=str(tmp_path / "a-file" / "home"))
    proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                  log=tmp_path / "run.log")
    assert proc.wait(timeout=600) == 3
    output = (tmp_path / "run.log").read_text(errors="replace")
    assert "the local Prefect server cannot keep its files in" in output and "PREFECT_HOME" in output, output
    assert "Traceback" not in output, output


HOLDS_THE_SERVER = """
import sys
from flows.local_server import BackgroundServer
from pipeline.settings import Settings

settings = Settings()  # as a command reads them: IDFLOW_PREFECT_UI, IDFLOW_PREFECT_SERVER_IDLE_S
with BackgroundServer(ui=settings.prefect_ui, idle_s=settings.prefect_server_idle_s) as server:
    server.wait()
    print(server.pid, flush=True)
    sys.stdin.read()  # holds the server until its stdin closes
"""


def _holder(env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[str], int]:
    """A process using the local server (as a run does) until its stdin is closed; and the server's pid."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDS_THE_SERVER], env=env, cwd=cwd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _stop_server(env: dict[str, str], cwd: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "idflow", "stop-server", *flags], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def test_a_server_in_use_is_neither_stopped_nor_lost(tmp_path: Path) -> None:
    """`stop-server` refuses while a run uses the server; a lease file deleted under a run does not make the
    server think it is idle; the idle time is the last joining run's; the server's environment holds no key."""
    home = tmp_path / "prefect-home"
    env = run_env(tmp_path, IDFLOW_PREFECT_SERVER_IDLE_S="600", PREFECT_API_KEY="pnu_not_for_the_server",
                  DB_URL="postgres://ops:hunter2@db/idflow")
    holder, pid = _holder(env, tmp_path)
    try:
        environ = _environ(pid)
        assert b"pnu_not_for_the_server" not in environ and b"hunter2" not in environ
        refused = _stop_server(env, tmp_path)
        assert refused.returncode == 2 and "--force" in refused.stdout, refused.stdout + refused.stderr
        assert prefect_servers(home) == [pid]

        for lease in (home / "idflow-server").glob("*/lease"):
            lease.unlink()  # a cleaner of old files
        second, same = _holder({**env, "IDFLOW_PREFECT_SERVER_IDLE_S": "0"}, tmp_path)  # the last wish: 0
        assert same == pid
        second.stdin.close()  # type: ignore[union-attr]
        assert second.wait(timeout=120) == 0
        # Idle 0 now, but the first holder still holds the deleted lease file: the server stays.
        assert healthy_after_a_while(pid, home)
        holder.stdin.close()  # type: ignore[union-attr]
        assert holder.wait(timeout=120) == 0
        no_server_left(home)
    finally:
        holder.kill()
        for server in prefect_servers(home):
            os.kill(server, signal.SIGKILL)


def healthy_after_a_while(pid: int, home: Path) -> bool:
    """The server `pid` still runs after its watcher has looked at the lease several times (it looks every
    0.5 s; an event that does not happen cannot be waited for, so this one waits for the watcher's ticks)."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        if prefect_servers(home) != [pid]:
            return False
        time.sleep(0.25)
    return True


def test_a_run_that_joined_a_server_that_went_away_starts_its_own(tmp_path: Path) -> None:
    """A state file naming a process that looks like the server but never answers: the run joins it; when that
    process is gone (stopped, killed), the run starts a server of its own instead of failing."""
    home = tmp_path / "prefect-home"
    (tmp_path / "in").mkdir()
    env = run_env(tmp_path)
    folder = Path(subprocess.run([sys.executable, "-c", "from flows.local_server import server_dir; "
                                  "print(server_dir())"], env=env, cwd=tmp_path, capture_output=True, text=True,
                                 check=True).stdout.strip())
    folder.mkdir(parents=True)
    fake = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "flows.local_server",
                             str(folder)])
    try:
        (folder / "state.json").write_text(json.dumps({"pid": fake.pid, "port": 9}))  # nothing answers there
        proc = idflow("run", str(tmp_path / "in"), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        wait_for(lambda: (folder / "idle").exists() or proc.poll() is not None, 300, "the run to join")
        fake.kill()
        assert proc.wait(timeout=600) == 0, (tmp_path / "run.log").read_text(errors="replace")[-3000:]
        no_server_left(home)
    finally:
        fake.kill()
        fake.wait()


def test_a_server_stopped_during_a_run_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """`stop-server --force` (or the server killed) under a run: once Prefect's client gives up, a line naming
    the API and what to do, exit 3 (not 1 and a traceback of idflow's), and what was finished stays stored; the
    command then ends within a minute, not after Prefect has retried every event it queued for 7 s each.
    200 pages at 0.3 s: the run is still going a minute after its first part, when the server is stopped."""
    scans = unique_scans(tmp_path / "in", 200)
    with ChatServer(ServerConfig(api_key=KEY, latency_s=0.3, max_concurrency=1)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url, IDFLOW_FLUSH_EVERY="1", IDFLOW_BATCH_SIZE="1",
                      IDFLOW_CONCURRENCY="1", PREFECT_CLIENT_MAX_RETRIES="0")
        proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        try:
            wait_for(lambda: any((tmp_path / "out").rglob("*.parquet")) or proc.poll() is not None, 900,
                     "the first Parquet part", every=0.2)
            stop = _stop_server(env, tmp_path, "--force")
            assert stop.returncode == 0, stop.stdout + stop.stderr
            stopped = time.monotonic()
            code = proc.wait(timeout=600)
            ended_after_s = time.monotonic() - stopped
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 3, output[-3000:]
    # Prefect's own log shows the crashed flow run's traceback above it; the command's last word is this line
    assert "stopped answering (ConnectError); what was finished is stored: run the same command again" in output, \
        output[-3000:]
    assert any((tmp_path / "out").rglob("*.parquet"))
    assert ended_after_s < 60, f"the command ended {ended_after_s:.0f} s after its server stopped"
    no_server_left(tmp_path / "prefect-home")
