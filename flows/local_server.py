"""The local Prefect server that runs use when no Prefect API is configured: started by the first run that needs
it, shared by the runs of the same Prefect home, stopped when no run has used it for a while.

Why not Prefect's own ephemeral server: it gives up after 20 s (`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`),
which a busy machine exceeds, it is stopped by an `atexit` hook (a run killed with SIGTERM or SIGKILL left it
running), and every run paid its start-up: importing Prefect's server app alone takes 6-8 s on two cores, which
made the fixed cost of `idflow run` 11-13 s. This one
- is started before Prefect is imported in the run's process, so a first start overlaps the run's imports;
- stays up for `IDFLOW_PREFECT_SERVER_IDLE_S` (a setting: 600 s; the wish of the run that joined last) after the
  last run that used it ended, however that run ended (each run holds a shared `flock` on the lease file while it
  uses the server; the kernel drops it when the run dies, SIGKILL included), so the next run starts in the time of
  its own imports; 0 stops it as soon as the last run ends; `idflow stop-server` stops it now, and refuses while
  runs use it unless `--force`;
- is one per Prefect home, server settings (the `PREFECT_*` environment) and Python environment, so runs with
  another database never share it, and two runs started together start one server, not two (a file lock); a run
  that joined a server which then went away before answering starts a new one;
- serves Prefect's UI beside its API (`IDFLOW_PREFECT_UI`, on by default; off: API only, a separate server), so
  the `View at` link a run prints opens the flow run: Prefect's own UI app, mounted in place of the disabled one
  of its ephemeral app (`create_app`), its files copied once per Prefect version into
  `PREFECT_HOME/idflow-server/ui` (not into the installed package, which may be read-only);
- listens on a socket the starting run bound and hands over (no port to race for), and gets no keys: its
  environment is an allow-list of the run's (system variables, `PYTHON*`, `LC_*`, and the `PREFECT_*` settings
  but for the API key and URL);
- is waited for up to `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS` when the user set it, else
  `STARTUP_TIMEOUT_S`, and a server that is not ready is one line naming both settings; loopback is kept out of
  the user's proxy.

Module import is cheap on purpose (standard library and `pipeline.store.atomic` only): Prefect is imported in
`BackgroundServer.wait` by the run, and in `serve` by the server.
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

from pipeline.store.atomic import write_json_atomic

STARTUP_TIMEOUT_S = 300  # generous: a cold start on a saturated 2-core machine takes over a minute
TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
WATCH_EVERY_S = 0.5
APP = "flows.local_server:create_app"
# What the server's environment keeps of the run's (it outlives the run, so nothing else: no keys, DSNs, tokens)
_SERVER_VARIABLES = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
                     "VIRTUAL_ENV", "LD_LIBRARY_PATH", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
                     "CURL_CA_BUNDLE", "SYSTEMROOT"}
_SERVER_PREFIXES = ("PREFECT_", "LC_", "PYTHON")
_NOT_FOR_THE_SERVER = ("PREFECT_API_URL", "PREFECT_API_KEY", "PREFECT_API_AUTH_STRING", "PREFECT_CLOUD_")
_LOOPBACK = "127.0.0.1,localhost"


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


def server_dir(ui: bool = True) -> Path:
    """Where the shared server of this Prefect home, the server's `PREFECT_*` settings (the UI on or off among
    them) and this Python environment (`sys.prefix`: another venv may hold another Prefect) keeps its state,
    lease and log."""
    settings = sorted((k, v) for k, v in server_env(ui).items() if k.startswith("PREFECT_"))
    key = hashlib.sha256(json.dumps([sys.prefix, settings]).encode()).hexdigest()[:16]
    return _prefect_home() / "idflow-server" / key


def server_env(ui: bool = True) -> dict[str, str]:
    """The server's environment: an allow-list of this one (the server outlives the run, so it gets no key,
    token or connection string it does not need; its own database URL is a `PREFECT_` setting it does need),
    with the UI on or off (`ui`: the command's `IDFLOW_PREFECT_UI`) and analytics off."""
    env = {k: v for k, v in os.environ.items()
           if (k in _SERVER_VARIABLES or k.startswith(_SERVER_PREFIXES)) and not k.startswith(_NOT_FOR_THE_SERVER)}
    return {**env, "PREFECT_UI_ENABLED": str(ui).lower(), "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def ui_static_dir() -> Path:
    """Where the UI's files are copied (Prefect adapts them to the address they are served at): the Prefect home,
    shared by its servers (Prefect locks the copy), unless `PREFECT_UI_STATIC_DIRECTORY` says otherwise."""
    return _prefect_home() / "idflow-server" / "ui"


class _State:
    """`state.json` of a shared server: its pid and port. Written by the run that starts it, holding
    `start.lock` and the lease; removed by the server when it stops (holding the lease exclusively when idle, or
    `start.lock` on its way out) and by `stop_shared_server` (holding `start.lock`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.path = folder / "state.json"

    def read(self) -> tuple[int, int] | None:
        """(pid, port) of a server that is still running, or None (no file, a damaged one, or a dead pid)."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            pid, port = int(data["pid"]), int(data["port"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return (pid, port) if is_shared_server(pid, self.folder) else None

    def write(self, pid: int, port: int) -> None:
        write_json_atomic(self.path, {"pid": pid, "port": port})

    def remove_if(self, pid: int) -> None:
        try:
            if json.loads(self.path.read_text(encoding="utf-8")).get("pid") == pid:
                self.path.unlink()
        except (OSError, ValueError, AttributeError):
            pass


def is_shared_server(pid: int, folder: Path) -> bool:
    """`pid` is the running shared server of `folder` (not a process that got its number after a reboot or a
    crash, nor another Prefect home's server)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        return b"flows.local_server" in words and os.fsencode(folder) in words
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


def _open_lease(folder: Path) -> IO[str]:
    return (folder / "lease").open("a")


def _is_current(lease: IO[str], folder: Path) -> bool:
    """`lease` is the file now at `folder/lease` (not one deleted or replaced since it was opened)."""
    try:
        return os.stat(folder / "lease").st_ino == os.fstat(lease.fileno()).st_ino
    except OSError:
        return False


def _idle_wish(folder: Path, default: float) -> float:
    """The idle time the run that joined last asked for (it writes `folder/idle`), else `default`."""
    try:
        value = float((folder / "idle").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default
    return value if 0 <= value < float("inf") else default


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def healthy(api_url: str) -> bool:
    """The Prefect API at `api_url` answers its health check (asked directly: a loopback server is never behind
    the user's proxy)."""
    try:
        with _NO_PROXY.open(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _loopback_without_proxy() -> None:
    """Add loopback to NO_PROXY when a proxy is set: Prefect's client (httpx) would send the local server's
    requests to the proxy, and the run would wait on it."""
    if not any(os.environ.get(v) for v in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                                           "ALL_PROXY")):
        return
    for variable in ("no_proxy", "NO_PROXY"):
        current = os.environ.get(variable, "")
        os.environ[variable] = f"{current},{_LOOPBACK}" if current else _LOOPBACK


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


def without_userinfo(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts._replace(netloc=parts.netloc.rsplit("@", 1)[-1]).geturl()


class BackgroundServer:
    """`with BackgroundServer(ui=..., idle_s=...) as server:` joins (or starts) the shared server unless an API is
    configured; `server.wait()` (after importing the flows) blocks until it is healthy and points this process and
    its children at it; leaving the block flushes Prefect's log and event queues and lets go of the server. `ui`
    and `idle_s` are the command's settings (`IDFLOW_PREFECT_UI`, `IDFLOW_PREFECT_SERVER_IDLE_S`), read by the
    command, not here: this module imports no settings, to stay cheap to import."""

    def __init__(self, *, ui: bool, idle_s: float) -> None:
        self.proc: subprocess.Popen[bytes] | None = None  # the server, when this run started it
        self.pid = 0
        self.port = 0
        self._error: ServerStartError | None = None  # found on the way in, told by `wait`
        self.ui = ui  # the server serves Prefect's UI too
        self._idle_s = idle_s  # how long the server stays up after the last run, as this command wishes
        self._folder = server_dir(self.ui)
        self._lease: IO[str] | None = None
        self._settings = ExitStack()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @property
    def ui_url(self) -> str | None:
        """The UI's address while this server lives (None: API only)."""
        return f"http://127.0.0.1:{self.port}" if self.ui else None

    @property
    def idle_s(self) -> float:
        """How long the server stays up after the last run lets go of it (the last joining run's wish)."""
        return _idle_wish(self._folder, self._idle_s)

    @property
    def _log(self) -> Path:
        return self._folder / "server.log"

    def __enter__(self) -> BackgroundServer:
        if self._error is None and configured_api_url() is None:
            try:
                self._join()
            except ServerStartError as exc:
                self._error = exc
            except OSError as exc:  # PREFECT_HOME read-only, full, not a folder, ...
                if self.proc is not None and self.proc.poll() is None:  # started, but its state could not be kept
                    self.proc.terminate()
                self.stop()
                self._error = ServerStartError(
                    f"the local Prefect server cannot keep its files in {self._folder} "
                    f"({exc.strerror or type(exc).__name__}): set PREFECT_HOME to a writable folder, or "
                    "PREFECT_API_URL to use a running server")
        return self

    def _join(self) -> None:
        """Hold the lease, then use the running server or start one. The lease comes first: a server that is
        stopping holds it exclusively and removes its state before letting go, so what is read after it is true."""
        idle = self._idle_s
        self._folder.mkdir(parents=True, exist_ok=True)
        with _file_lock(self._folder / "start.lock"):
            self._lease = _open_lease(self._folder)
            fcntl.flock(self._lease, fcntl.LOCK_SH)
            while not _is_current(self._lease, self._folder):  # deleted (a cleaner) or replaced meanwhile
                self._lease.close()
                self._lease = _open_lease(self._folder)
                fcntl.flock(self._lease, fcntl.LOCK_SH)
            write_json_atomic(self._folder / "idle", idle)  # the watcher applies the last joining run's wish
            state = _State(self._folder)
            running = state.read()
            if running is not None:
                self.pid, self.port = running
                return
            self._spawn(idle)
            state.write(self.pid, self.port)

    def _spawn(self, idle: float) -> None:
        """`python -m flows.local_server` on a socket bound here: Prefect's app as its ephemeral server runs it
        (services that need a long-lived server, like the scheduler, stay off), with the UI unless API only, in a
        session of its own so a Ctrl-C in the terminal reaches only the run. The UI is told the API's address
        (its port is only known here)."""
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(128)
            self.port = listener.getsockname()[1]
            env = server_env(self.ui)
            if self.ui:
                env["PREFECT_UI_API_URL"] = self.api_url
                env.setdefault("PREFECT_UI_STATIC_DIRECTORY", str(ui_static_dir()))
            with self._log.open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-P", "-m", "flows.local_server", "--fd", str(listener.fileno()),
                     "--idle", str(idle), "--folder", str(self._folder)],
                    env=env, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(listener.fileno(),))
        self.pid = self.proc.pid

    def _alive(self) -> bool:
        return self.proc.poll() is None if self.proc is not None else is_shared_server(self.pid, self._folder)

    def _let_go(self) -> None:
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.close()

    def wait(self) -> str | None:
        """Block until the server answers `/api/health`, then set PREFECT_API_URL for this process (a Prefect
        settings context) and its children (the environment). Returns the API URL the run uses."""
        from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings
        from prefect.settings.models.server.ephemeral import ServerEphemeralSettings

        if self._error is not None:
            raise self._error
        settings = get_current_settings()
        if self._lease is None or settings.api.url:  # configured (also in .env or prefect.toml): use that one
            self.stop()
            if settings.api.url and (why := unreachable(settings.api.url)):
                raise ServerStartError(f"the Prefect API at {without_userinfo(settings.api.url)} does not answer "
                                       f"({why}): start it (`prefect server start`), or unset PREFECT_API_URL "
                                       "to let idflow start a local one")
            return settings.api.url
        default = ServerEphemeralSettings.model_fields["startup_timeout_seconds"].default
        chosen = settings.server.ephemeral.startup_timeout_seconds
        timeout = chosen if TIMEOUT_VAR in os.environ or chosen != default else STARTUP_TIMEOUT_S
        deadline = time.monotonic() + timeout
        while not healthy(self.api_url):
            if time.monotonic() > deadline:
                last = self._last_line()
                self.stop()
                raise ServerStartError(f"the local Prefect server (pid {self.pid}) was not ready after {timeout} s "
                                       f"({last}): set {TIMEOUT_VAR} to wait longer, `idflow stop-server --force` "
                                       "to replace it, or PREFECT_API_URL to use a running server")
            if not self._alive() and self.proc is None:  # joined one that went away (stopped, killed): start one
                self._let_go()
                self._join()
            elif not self._alive():
                last = self._last_line()
                self.stop()
                raise ServerStartError(f"the local Prefect server exited with code {self.proc.returncode} before "
                                       f"it was ready ({last}); set PREFECT_API_URL to use a running server")
            time.sleep(0.2)
        _loopback_without_proxy()
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
        self._let_go()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop(drain_s=10.0 if exc_type is None else 2.0)  # a run being terminated does not wait long for logs


def _drain_prefect_queues(timeout: float) -> None:
    """Send the logs and events Prefect still holds before the run lets go of the server."""
    if "prefect.logging.handlers" in sys.modules:
        sys.modules["prefect.logging.handlers"].APILogWorker.drain_all(timeout=timeout)
    if "prefect.events.worker" in sys.modules:
        sys.modules["prefect.events.worker"].EventsWorker.drain_all(timeout=timeout)


_PREFECT_QUEUES = (("prefect.logging.handlers", "APILogWorker"), ("prefect.events.worker", "EventsWorker"))


def forget_prefect_queues() -> int:
    """Drop the logs and events Prefect still holds for its API (one that stopped answering); how many.

    Why: before the process exits, Prefect sends what it queued, and tries each event 11 times (about 7 s) against
    an API that is gone, so a run whose server was stopped under it said so within a second and then took
    3.5 minutes to exit (30 events queued). Prefect has no call to discard a queue: this empties the queues of its
    running queue services (their `_instances` and `_queue`) and leaves each service's stop marker in place. Should
    those names change, nothing is dropped and the exit is slow again (test_prefect_background.py times it)."""
    import queue

    dropped = 0
    services = [service for module, name in _PREFECT_QUEUES
                if isinstance(service := getattr(sys.modules.get(module), name, None), type)]
    running = {id(i): i for service in services for i in list(getattr(service, "_instances", {}).values())}
    for instance in running.values():  # the dict is shared by Prefect's queue services: keep to these two
        pending = getattr(instance, "_queue", None)
        if isinstance(instance, tuple(services)) and isinstance(pending, queue.Queue):
            dropped += _empty(pending, instance)
    return dropped


def _empty(pending: Any, instance: Any) -> int:
    """Take every item out of a Prefect queue service's queue but its stop marker (None); how many."""
    import queue

    taken, stop_marker = 0, False
    while True:
        try:
            item = pending.get_nowait()
        except queue.Empty:
            break
        pending.task_done()
        if item is None:
            stop_marker = True
        else:
            taken += 1
            getattr(instance, "_on_item_dropped", lambda _: None)(item)
    if stop_marker:
        pending.put_nowait(None)
    return taken


class ServerInUse(RuntimeError):
    """Runs hold the shared server: stopping it would fail them."""


def stop_shared_server(force: bool = False) -> int | None:
    """Stop the shared server of this environment now (its state goes first, so no run joins it on its way
    out; then SIGTERM: it finishes the requests it has). Its pid, or None when none runs; `ServerInUse` when runs
    hold it, unless `force`. The server with the UI and the API-only one are both stopped."""
    stopped = [pid for ui in (True, False) if (pid := _stop_in(server_dir(ui), force)) is not None]
    return stopped[0] if stopped else None


def _stop_in(folder: Path, force: bool) -> int | None:
    if not folder.is_dir():
        return None
    with _file_lock(folder / "start.lock"), _open_lease(folder) as lease:
        state = _State(folder)
        running = state.read()
        if running is None:
            return None
        try:
            fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not force:
                raise ServerInUse(f"runs are using the local Prefect server (pid {running[0]}); it stops by itself "
                                  "once they end and it has been idle, or `--force` stops it now (those runs then "
                                  "fail; run them again)") from None
        state.remove_if(running[0])
        os.kill(running[0], signal.SIGTERM)
    return running[0]


def _watch_idle(server: Any, folder: Path, idle_s: float) -> None:
    """Stop `server` once no run has held the lease for the idle time (the last joining run's wish, else
    `idle_s`). The check takes the lease exclusively, which succeeds only when no run holds it; the state is
    removed before the lease is let go, so a run that was waiting for the lease then starts a new server instead
    of joining this one. A lease file deleted or replaced meanwhile is watched too while runs still hold it."""
    state, last_used = _State(folder), time.monotonic()
    leases: list[IO[str]] = []
    while not server.should_exit:
        if not any(_is_current(lease, folder) for lease in leases):
            try:
                leases.append(_open_lease(folder))
            except OSError:  # the folder itself was deleted: the runs that hold the files already open count
                pass
        free = []
        for lease in leases:
            try:
                fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
                free.append(lease)
            except BlockingIOError:
                last_used = time.monotonic()
        done = len(free) == len(leases) and time.monotonic() - last_used >= _idle_wish(folder, idle_s)
        if done:  # no run can be writing the state now: a run writes it holding the lease
            state.remove_if(os.getpid())
        for lease in free:
            fcntl.flock(lease, fcntl.LOCK_UN)
            if not _is_current(lease, folder):  # an old file no run holds any more
                leases.remove(lease)
                lease.close()
        if done:
            if not server.started:  # still importing Prefect's app: nothing to shut down in order
                os._exit(0)
            server.should_exit = True
            return
        time.sleep(WATCH_EVERY_S)


def create_app() -> Any:
    """Prefect's app as its ephemeral server builds it (the services of a long-lived server stay off), with
    Prefect's UI app mounted at `/` in place of the one the ephemeral mode leaves empty, unless the UI is off
    (`PREFECT_UI_ENABLED`, which the starting run sets from `IDFLOW_PREFECT_UI`)."""
    from prefect.server.api.server import create_app as prefect_app
    from prefect.server.api.server import create_ui_app
    from prefect.settings import get_current_settings
    from starlette.routing import Mount

    app = prefect_app()
    if get_current_settings().server.ui.enabled:
        routes = app.router.routes
        (index,) = [i for i, route in enumerate(routes) if isinstance(route, Mount) and route.name == "ui"]
        routes[index] = Mount("/", app=create_ui_app(ephemeral=False), name="ui")
    return app


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
