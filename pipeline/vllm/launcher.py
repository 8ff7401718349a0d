"""Start, check and stop the local server processes behind the `vllm` backend.

Why a pid file with start times and a pool file: `idflow vllm up` returns once the servers are ready and
leaves them running; `down` must later stop exactly those processes (each in its own process group, so the
EngineCore children go too) and never an unrelated process that reused a pid. The pool file tells the `vllm`
backend where the ready servers are. Both live in the state dir; neither holds the API key.

Readiness is stricter than "the port answers": `/health` must say 200 *and* one tiny real chat request must
succeed (`/health` can stay 200 after a GPU fault), and only then does a server join the pool file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx

from pipeline.settings import PID_FILE, POOL_FILE, STATS_FILE
from pipeline.store.atomic import write_json_atomic
from pipeline.vllm.command import ServerSpec
from pipeline.vllm.watchdog import LogWatchdog, StartupWatch

PROBE_TEXT = "Reply with the single word OK."
Report = Callable[[str], None]


class LaunchError(RuntimeError):
    """Servers cannot be started as asked (port taken, servers already running); the message says why."""


@dataclass(slots=True)
class ServerProcess:
    """One started server as recorded in the pid file."""

    name: str
    pid: int
    start_ticks: int | None  # /proc start time: tells our process from a later one that reused the pid
    host: str
    port: int
    root_url: str
    base_url: str
    log: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServerProcess:
        return cls(**data)


@dataclass(slots=True)
class UpResult:
    ready: list[ServerProcess] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # server name -> why it did not become ready
    diagnoses: list[str] = field(default_factory=list)  # what the watchdogs said about stalls


@dataclass(slots=True)
class ServerStatus:
    name: str
    pid: int
    base_url: str
    running: bool
    healthy: bool
    requests_running: float | None  # from /metrics, when the server exposes it
    requests_waiting: float | None
    pool: dict[str, Any] | None  # what the last pool run recorded for this endpoint (served, failures, ...)


# -- files ------------------------------------------------------------------------------------------------

def read_pids(state_dir: Path) -> list[ServerProcess]:
    path = state_dir / PID_FILE
    if not path.is_file():
        return []
    return [ServerProcess.from_json(d) for d in json.loads(path.read_text(encoding="utf-8"))["servers"]]


def _write_pids(state_dir: Path, servers: Sequence[ServerProcess]) -> None:
    write_json_atomic(state_dir / PID_FILE, {"servers": [asdict(s) for s in servers]})


def write_pool(state_dir: Path, servers: Sequence[ServerProcess], model: str) -> None:
    write_json_atomic(state_dir / POOL_FILE, {"model": model, "endpoints": [s.base_url for s in servers],
                                              "pids": [s.pid for s in servers]})


# -- processes --------------------------------------------------------------------------------------------

def proc_start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot (Linux), or None when unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def _group_members(pgid: int) -> list[int] | None:
    """Live (non-zombie) processes of a process group, from /proc; None where /proc is not available."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    members = _group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_ours(server: ServerProcess) -> bool:
    """False when the pid now belongs to another process (pid reuse after a reboot or a long time)."""
    ticks = proc_start_ticks(server.pid)
    return ticks is None or server.start_ticks is None or ticks == server.start_ticks


def stop_server(server: ServerProcess, timeout_s: float) -> str:
    """SIGTERM to the server's process group, SIGKILL after `timeout_s`; a one-line account of what happened."""
    if not is_ours(server):
        return f"{server.name}: pid {server.pid} now belongs to another process; left alone"
    if not group_alive(server.pid):
        _reap(server.pid)
        return f"{server.name}: pid {server.pid} was not running"
    _signal_group(server.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(server.pid)
        if not group_alive(server.pid):
            return f"{server.name}: pid {server.pid} stopped"
        time.sleep(0.1)
    _signal_group(server.pid, signal.SIGKILL)
    time.sleep(0.2)
    _reap(server.pid)
    return f"{server.name}: pid {server.pid} killed after {timeout_s:g} s"


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    """Collect the exit status when we are the parent (same process as `up`), so no zombie looks alive."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


# -- ports ------------------------------------------------------------------------------------------------

def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def port_owner(port: int) -> tuple[int, str] | None:
    """(pid, command line) of the process listening on `port`, from /proc (Linux; None when unknown)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:  # 0A = LISTEN
                inodes.add(f"socket:[{cols[9]}]")
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) in inodes for fd in fd_dir.iterdir()):
                pid = int(fd_dir.parent.name)
                cmdline = (fd_dir.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return pid, cmdline.strip()
        except OSError:
            continue
    return None


def preflight(specs: Sequence[ServerSpec], state_dir: Path) -> list[str]:
    """Problems that would make `up` fail or start a second pool; empty when it can go ahead.

    Dead entries of an earlier pid file are stale and removed here.
    """
    problems = []
    alive = [s for s in read_pids(state_dir) if is_ours(s) and group_alive(s.pid)]
    if alive:
        problems.append(f"servers from an earlier `idflow vllm up` are still running in {state_dir} (pids "
                        f"{', '.join(str(s.pid) for s in alive)}): run `idflow vllm down` first")
    else:
        _forget_pool(state_dir)
    for spec in specs:
        if not port_in_use(spec.host, spec.port):
            continue
        owner = port_owner(spec.port)
        if owner is None:
            problems.append(f"port {spec.port} is already taken: choose another --port-base")
        else:
            pid, cmdline = owner
            stale = "a stale vLLM server" if "vllm" in cmdline else "another program"
            problems.append(f"port {spec.port} is taken by pid {pid} ({stale}: {cmdline[:120]}): stop it "
                            f"(`kill {pid}`) or choose another --port-base")
    return problems


# -- readiness --------------------------------------------------------------------------------------------

def probe(server: ServerProcess, *, model: str, api_key: str, timeout_s: float = 30.0) -> tuple[bool, str]:
    """(ready, why not): `/health` 200, then one tiny chat request answered with a choice."""
    try:
        with httpx.Client(timeout=timeout_s) as client:
            health = client.get(f"{server.root_url}/health", timeout=min(5.0, timeout_s))
            if health.status_code != 200:
                return False, f"/health answered {health.status_code}"
            reply = client.post(f"{server.base_url}/chat/completions",
                                headers={"Authorization": f"Bearer {api_key}"},
                                json={"model": model, "temperature": 0, "max_tokens": 4,
                                      "messages": [{"role": "user", "content": PROBE_TEXT}]})
    except httpx.HTTPError as exc:
        return False, f"not answering yet ({type(exc).__name__})"
    if reply.status_code != 200 or not reply.json().get("choices"):
        return False, f"chat request answered HTTP {reply.status_code}: {reply.text[:200]}"
    return True, ""


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


Started = list[tuple[ServerProcess, "subprocess.Popen[bytes]"]]


def start(specs: Sequence[ServerSpec], state_dir: Path, api_key: str) -> Started:
    """Start every server in its own session (so its whole process tree can be signalled), output to a log
    file; the pid file is rewritten after each start, so `down` can stop what started even if `up` dies."""
    logs = state_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    started: Started = []
    for spec in specs:
        log_path = logs / f"{spec.name}.log"
        env = {**os.environ, **spec.env, **({spec.key_env: api_key} if spec.key_env else {})}
        with log_path.open("wb") as log:
            popen = subprocess.Popen(spec.argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        server = ServerProcess(spec.name, popen.pid, proc_start_ticks(popen.pid), spec.host, spec.port,
                               spec.root_url, spec.base_url, str(log_path))
        started.append((server, popen))
        _write_pids(state_dir, [s for s, _ in started])
    return started


def up(specs: Sequence[ServerSpec], *, state_dir: Path, api_key: str, model: str, max_pixels: int, patch: int,
       startup_timeout_s: float, stall_after_s: float, stop_timeout_s: float = 10.0,
       report: Report = lambda message: None, poll_s: float = 0.5) -> UpResult:
    """Start the servers, watch their logs, wait until each is ready or fails; write the pool file.

    A server that exits or is not ready within `startup_timeout_s` is stopped and left out of the pool; the
    others are kept. Raises LaunchError before starting anything when `preflight` finds a problem.
    """
    problems = preflight(specs, state_dir)
    if problems:
        raise LaunchError("\n".join(problems))
    result = UpResult()
    started = start(specs, state_dir, api_key)
    watchdogs = [LogWatchdog(Path(s.log), StartupWatch(s.name, max_pixels=max_pixels, patch=patch,
                                                       stall_after_s=stall_after_s), report).start()
                 for s, _ in started]
    try:
        _wait_ready(started, result, model=model, api_key=api_key, timeout_s=startup_timeout_s, report=report,
                    poll_s=poll_s)
    except BaseException:  # Ctrl-C while waiting: nothing half-started stays behind
        for server, _ in started:
            stop_server(server, stop_timeout_s)
        (state_dir / PID_FILE).unlink(missing_ok=True)
        raise
    finally:
        for watchdog in watchdogs:
            watchdog.stop()
            result.diagnoses.extend(watchdog.diagnoses)
    for server, _ in started:
        if server.name in result.failed:
            report(stop_server(server, stop_timeout_s))
    _write_pids(state_dir, result.ready)
    if result.ready:
        write_pool(state_dir, result.ready, model)
    else:
        (state_dir / PID_FILE).unlink(missing_ok=True)
    return result


def _wait_ready(started: Started, result: UpResult, *,
                model: str, api_key: str, timeout_s: float, report: Report, poll_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    waiting = dict((s.name, (s, p)) for s, p in started)
    while waiting:
        for name, (server, popen) in list(waiting.items()):
            if popen.poll() is not None:
                result.failed[name] = (f"exited with code {popen.returncode} before it was ready; last log "
                                       f"lines:\n{_log_tail(Path(server.log))}")
            else:
                ok, why = probe(server, model=model, api_key=api_key)
                if ok:
                    result.ready.append(server)
                    report(f"{name}: ready at {server.base_url}")
                elif why.startswith("chat request answered HTTP 4"):
                    result.failed[name] = why  # a client error will not go away by waiting
                elif time.monotonic() > deadline:
                    result.failed[name] = f"not ready after {timeout_s:g} s ({why})"
                else:
                    continue
            del waiting[name]
        if waiting:
            time.sleep(poll_s)
    result.ready.sort(key=lambda s: s.port)


# -- status and down --------------------------------------------------------------------------------------

def _metric(text: str, name: str) -> float | None:
    """Sum of a Prometheus gauge over its label sets (vLLM: one series per model/engine)."""
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith(name) and not line.startswith("#") and line[len(name):len(name) + 1] in "{ "]
    return sum(values) if values else None


def status(state_dir: Path, timeout_s: float = 2.0) -> list[ServerStatus]:
    """Each server of the pid file: process alive, `/health`, requests running/waiting (from `/metrics`),
    and the last pool run's counters for its endpoint."""
    stats_path = state_dir / STATS_FILE
    pool_stats = json.loads(stats_path.read_text(encoding="utf-8")) if stats_path.is_file() else {}
    rows = []
    for server in read_pids(state_dir):
        running = is_ours(server) and group_alive(server.pid)
        healthy, running_n, waiting_n = False, None, None
        if running:
            try:
                with httpx.Client(timeout=timeout_s) as client:
                    healthy = client.get(f"{server.root_url}/health").status_code == 200
                    metrics = client.get(f"{server.root_url}/metrics")
                if metrics.status_code == 200:
                    running_n = _metric(metrics.text, "vllm:num_requests_running")
                    waiting_n = _metric(metrics.text, "vllm:num_requests_waiting")
            except httpx.HTTPError:
                pass
        rows.append(ServerStatus(server.name, server.pid, server.base_url, running, healthy, running_n, waiting_n,
                                 pool_stats.get("endpoints", {}).get(server.base_url)))
    return rows


def down(state_dir: Path, timeout_s: float, report: Report = lambda message: None) -> int:
    """Stop the servers of the pid file (and only those), in parallel; remove the pid and pool files.
    Returns how many were stopped."""
    servers = read_pids(state_dir)
    messages: list[str] = []
    threads = [threading.Thread(target=lambda s=s: messages.append(stop_server(s, timeout_s))) for s in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for message in sorted(messages):
        report(message)
    _forget_pool(state_dir)
    return len(servers)


def _forget_pool(state_dir: Path) -> None:
    """No pid, pool or counters file outlives the servers they describe."""
    for name in (PID_FILE, POOL_FILE, STATS_FILE):
        (state_dir / name).unlink(missing_ok=True)
