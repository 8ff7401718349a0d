"""The local Prefect server that runs use when no Prefect API is configured: started by the first run that needs
it, shared by the runs of the same Prefect home, stopped when no run has used it for a while.

Why not Prefect's own ephemeral server: it gives up after 20 s (`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`),
which a busy machine exceeds, it is stopped by an `atexit` hook (a run killed with SIGTERM or SIGKILL left it
running), and every run paid its start-up: importing Prefect's server app alone takes 6-8 s on two cores, which
made the fixed cost of `idflow run` 11-13 s. This one
- is started before Prefect is imported in the run's process, so a first start overlaps the run's imports;
- stays up for `IDFLOW_PREFECT_SERVER_IDLE_S` (600 s) after the last run that used it ended, however that run
  ended (each run holds a shared `flock` on the lease file while it uses the server; the kernel drops it when
  the run dies, SIGKILL included), so the next run starts in the time of its own imports; 0 stops it as soon as
  the last run ends;
- is one per Prefect home and server settings (the `PREFECT_*` environment and the interpreter), so runs with
  another database never share it, and two runs started together start one server, not two (a file lock);
- listens on a socket the starting run bound and hands over (no port to race for), and gets no keys: variables
  that name keys, tokens, secrets or passwords, and every `IDFLOW_`/`TAOTOKEN_`/`OPENAI_` one, are left out of
  its environment;
- is waited for up to `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS` when the user set it, else
  `STARTUP_TIMEOUT_S`, and a server that is not ready is one line naming both settings.

Module import is cheap on purpose (standard library only): Prefect is imported in `BackgroundServer.wait` by the
run, and in `serve` by the server.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import IO, Any

STARTUP_TIMEOUT_S = 300  # generous: a cold start on a saturated 2-core machine takes over a minute
TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
IDLE_VAR = "IDFLOW_PREFECT_SERVER_IDLE_S"
DEFAULT_IDLE_S = 600.0
WATCH_EVERY_S = 0.5
APP = "prefect.server.api.server:create_app"
_NOT_FOR_THE_SERVER = ("IDFLOW_", "TAOTOKEN_", "OPENAI_")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


class ServerStartError(RuntimeError):
    """The local server did not become healthy; the message is one line for the console."""


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment or the active Prefect profile, read without importing Prefect (the
    other setting sources are checked after the import, in `BackgroundServer.wait`)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    if "prefect.settings" in sys.modules:  # already imported (e.g. in a test harness): ask it, it is cheap now
        return sys.modules["prefect.settings"].get_current_settings().api.url
    profiles = _read_toml(_prefect_home() / "profiles.toml", "PREFECT_PROFILES_PATH")
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active", "ephemeral")
    return profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL") or None


def _prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()


def _read_toml(default: Path, variable: str) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(os.environ.get(variable, default)).expanduser().read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return {}


def server_dir() -> Path:
    """Where the shared server of this Prefect home, these `PREFECT_*` settings and this interpreter keeps its
    state, lease and log."""
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("PREFECT_") and k != "PREFECT_API_URL")
    key = hashlib.sha256(json.dumps([sys.executable, settings]).encode()).hexdigest()[:16]
    return _prefect_home() / "idflow-server" / key


def server_env() -> dict[str, str]:
    """The server's environment: this one without keys (it outlives the run) and with the UI and analytics off."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_NOT_FOR_THE_SERVER)
           and (k.startswith("PREFECT_") or not any(word in k.upper() for word in _SECRET_WORDS))}
    env.pop("PREFECT_API_URL", None)
    return {**env, "PREFECT_UI_ENABLED": "false", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def idle_seconds() -> float:
    """`IDFLOW_PREFECT_SERVER_IDLE_S`, checked: a server that stays forever or a typo must not pass silently."""
    raw = os.environ.get(IDLE_VAR, "").strip()
    try:
        value = float(raw) if raw else DEFAULT_IDLE_S
    except ValueError:
        raise ServerStartError(f"{IDLE_VAR}={raw!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise ServerStartError(f"{IDLE_VAR}={raw!r} must be 0 or more seconds")
    return value


class _State:
    """`state.json` of a shared server: its pid and port. Written by the run that starts it, holding
    `start.lock` and the lease; removed by the server when it stops (holding the lease exclusively when idle, or
    `start.lock` on its way out)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "state.json"

    def read(self) -> tuple[int, int] | None:
        """(pid, port) of a server that is still running, or None (no file, a damaged one, or a dead pid)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            pid, port = int(data["pid"]), int(data["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return (pid, port) if is_shared_server(pid) else None

    def write(self, pid: int, port: int) -> None:
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"pid": pid, "port": port}), encoding="utf-8")
        os.replace(tmp, self.path)

    def remove_if(self, pid: int) -> None:
        try:
            if json.loads(self.path.read_text(encoding="utf-8")).get("pid") == pid:
                self.path.unlink()
        except (OSError, ValueError, AttributeError):
            pass


def is_shared_server(pid: int) -> bool:
    """`pid` is a running shared server (not a process that got its number after a reboot or a crash)."""
    try:
        return b"flows.local_server" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        if sys.platform.startswith("linux"):
            return False
    try:  # no /proc: the pid is alive, that is all we can know
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _file_lock(path: Path) -> Any:
    from filelock import FileLock

    return FileLock(str(path))


def healthy(api_url: str) -> bool:
    """The Prefect API at `api_url` answers its health check."""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def unreachable(api_url: str) -> str | None:
    """Why the Prefect API at `api_url` gives no HTTP answer at all; None when it answers anything (an HTTP error
    too: Prefect Cloud without a key says 401, and Prefect's own client explains that better)."""
    try:
        with urllib.request.urlopen(f"{api_url.rstrip('/')}/health", timeout=10):
            return None
    except urllib.error.HTTPError:
        return None
    except (OSError, ValueError) as exc:
        return " ".join(str(getattr(exc, "reason", exc)).split()) or type(exc).__name__


def _without_userinfo(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()


class BackgroundServer:
    """`with BackgroundServer() as server:` joins (or starts) the shared server unless an API is configured;
    `server.wait()` (after importing the flows) blocks until it is healthy and points this process and its
    children at it; leaving the block flushes Prefect's log and event queues and lets go of the server."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None  # the server, when this run started it
        self.pid = 0
        self.port = 0
        self._folder = server_dir()
        self._lease: IO[str] | None = None
        self._error: ServerStartError | None = None  # found on the way in, told by `wait`
        self._settings = ExitStack()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def _log(self) -> Path:
        return self._folder / "server.log"

    def __enter__(self) -> BackgroundServer:
        if configured_api_url() is None:
            try:
                self._join()
            except ServerStartError as exc:
                self._error = exc
        return self

    def _join(self) -> None:
        """Hold the lease, then use the running server or start one. The lease comes first: a server that is
        stopping holds it exclusively and removes its state before letting go, so what is read after it is true."""
        idle = idle_seconds()
        self._folder.mkdir(parents=True, exist_ok=True)
        with _file_lock(self._folder / "start.lock"):
            self._lease = (self._folder / "lease").open("a")
            fcntl.flock(self._lease, fcntl.LOCK_SH)
            state = _State(self._folder)
            running = state.read()
            if running is not None:
                self.pid, self.port = running
                return
            self._spawn(idle)
            state.write(self.pid, self.port)

    def _spawn(self, idle: float) -> None:
        """`python -m flows.local_server` on a socket bound here: Prefect's app as its ephemeral server runs it
        (services that need a long-lived server, like the scheduler, stay off), UI off, in a session of its own
        so a Ctrl-C in the terminal reaches only the run."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            with self._log.open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-P", "-m", "flows.local_server", "--fd", str(listener.fileno()),
                     "--idle", str(idle), "--folder", str(self._folder)],
                    env=server_env(), stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(listener.fileno(),))
        self.pid = self.proc.pid

    def _alive(self) -> bool:
        return self.proc.poll() is None if self.proc is not None else is_shared_server(self.pid)

    def wait(self) -> str | None:
        """Block until the server answers `/api/health`, then set PREFECT_API_URL for this process (a Prefect
        settings context) and its children (the environment). Returns the API URL the run uses."""
        from prefect.settings import get_current_settings
        from prefect.settings import PREFECT_API_URL, temporary_settings
        from prefect.settings.models.server.ephemeral import ServerEphemeralSettings

        if self._error is not None:
            raise self._error
        settings = get_current_settings()
        if self._lease is None or settings.api.url:  # configured (also in .env or prefect.toml): use that one
            self.stop()
            if settings.api.url and (why := unreachable(settings.api.url)):
                raise ServerStartError(f"the Prefect API at {_without_userinfo(settings.api.url)} does not answer "
                                       f"({why}): start it (`prefect server start`), or unset PREFECT_API_URL "
                                       "to let idflow start a local one")
            return settings.api.url
        default = ServerEphemeralSettings.model_fields["startup_timeout_seconds"].default
        chosen = settings.server.ephemeral.startup_timeout_seconds
        timeout = chosen if TIMEOUT_VAR in os.environ or chosen != default else STARTUP_TIMEOUT_S
        deadline = time.monotonic() + timeout
        while not healthy(self.api_url):
            if not self._alive():
                code = f" with code {self.proc.returncode}" if self.proc is not None else ""
                last = self._last_line()
                self.stop()
                raise ServerStartError(f"the local Prefect server exited{code} before it was ready ({last}); set "
                                       "PREFECT_API_URL to use a running server")
            if time.monotonic() > deadline:
                last = self._last_line()
                self.stop()
                raise ServerStartError(f"the local Prefect server was not ready after {timeout} s ({last}): set "
                                       f"{TIMEOUT_VAR} to wait longer, or PREFECT_API_URL to use a running server")
            time.sleep(0.2)
        os.environ["PREFECT_API_URL"] = self.api_url
        self._settings.enter_context(temporary_settings(updates={PREFECT_API_URL: self.api_url}))
        return self.api_url

    def _last_line(self) -> str:
        try:
            lines = self._log.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return f"last output: {lines[-1][:200]}" if lines else "no output"

    def stop(self, drain_s: float = 10.0) -> None:
        """Flush what Prefect still queues for the server (up to `drain_s` per queue), then let go of the lease:
        the server stops by itself once no run has held it for its idle time."""
        if self._lease is None:
            return
        if os.environ.get("PREFECT_API_URL") == self.api_url:
            _drain_prefect_queues(drain_s)
            del os.environ["PREFECT_API_URL"]
        self._settings.close()
        lease, self._lease = self._lease, None
        lease.close()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(drain_s=10.0 if exc_type is None else 2.0)  # a run being terminated does not wait long for logs


def _drain_prefect_queues(timeout: float) -> None:
    """Send the logs and events Prefect still holds before the run lets go of the server."""
    if "prefect.logging.handlers" in sys.modules:
        sys.modules["prefect.logging.handlers"].APILogWorker.drain_all(timeout=timeout)
    if "prefect.events.worker" in sys.modules:
        sys.modules["prefect.events.worker"].EventsWorker.drain_all(timeout=timeout)


def stop_shared_server() -> int | None:
    """Ask the shared server of this environment to stop now (SIGTERM; it finishes the requests it has); its pid,
    or None when none runs."""
    folder = server_dir()
    running = _State(folder).read() if folder.is_dir() else None
    if running is None:
        return None
    os.kill(running[0], signal.SIGTERM)
    return running[0]


def _watch_idle(server: Any, folder: Path, idle_s: float) -> None:
    """Stop `server` once no run has held the lease for `idle_s`. The check takes the lease exclusively, which
    succeeds only when no run holds it; the state is removed before the lease is let go, so a run that was
    waiting for the lease then starts a new server instead of joining this one."""
    state, last_used = _State(folder), time.monotonic()
    with (folder / "lease").open("a") as lease:
        while not server.should_exit:
            try:
                fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                last_used = time.monotonic()
            else:
                done = time.monotonic() - last_used >= idle_s
                if done:  # no run can be writing the state now: a run writes it holding the lease
                    state.remove_if(os.getpid())
                fcntl.flock(lease, fcntl.LOCK_UN)
                if done:
                    if not server.started:  # still importing Prefect's app: nothing to shut down in order
                        os._exit(0)
                    server.should_exit = True
                    return
            time.sleep(WATCH_EVERY_S)


def serve(argv: list[str] | None = None) -> None:
    """The shared server's process: uvicorn on Prefect's app factory, on the socket its starting run bound, with
    a thread that stops it when idle."""
    parser = argparse.ArgumentParser(prog="python -m flows.local_server")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--idle", type=float, required=True)
    parser.add_argument("--folder", type=Path, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    config = uvicorn.Config(APP, factory=True, log_level="error", lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn re-raises the SIGTERM it caught once it has shut down; this handler turns that into SystemExit, so
    # the state is removed below instead of the process dying on the spot
    signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))
    threading.Thread(target=_watch_idle, args=(server, args.folder, args.idle), daemon=True).start()
    try:
        server.run(sockets=[socket.socket(fileno=args.fd)])
    finally:
        with _file_lock(args.folder / "start.lock"):
            _State(args.folder).remove_if(os.getpid())


if __name__ == "__main__":
    serve()
