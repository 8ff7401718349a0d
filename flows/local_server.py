"""A temporary Prefect server for a run when no Prefect API is configured, owned by the run's process.

Why not Prefect's own ephemeral server: it gives up after 20 s (`PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`),
which a busy machine exceeds, and it is stopped by an `atexit` hook, so a run killed with SIGTERM or SIGKILL leaves
the server running. This one
- starts before Prefect is imported in this process, so the server's start-up overlaps the import and the
  discovery that follow (the fixed cost of `idflow run`);
- waits for `/api/health` for `PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS` when the user set it, else
  `STARTUP_TIMEOUT_S`, and fails with one line naming both settings;
- dies with its parent (Linux `prctl(PR_SET_PDEATHSIG, SIGKILL)`, in its own process group so a Ctrl-C in the
  terminal reaches only the run, which then stops it in order).

Module import is cheap on purpose (standard library only); Prefect is imported in `BackgroundServer.wait`.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType

STARTUP_TIMEOUT_S = 300  # generous: a cold start on a saturated 2-core machine takes over a minute
TIMEOUT_VAR = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
PORT_IN_USE = 3  # uvicorn's exit code when the port was taken between choosing and binding it
PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The temporary server did not become healthy; the message is one line for the console."""


def configured_api_url() -> str | None:
    """PREFECT_API_URL from the environment or the active Prefect profile, read without importing Prefect (the
    other setting sources are checked after the import, in `BackgroundServer.wait`)."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    if "prefect.settings" in sys.modules:  # already imported (e.g. in a test harness): ask it, it is cheap now
        return sys.modules["prefect.settings"].get_current_settings().api.url
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml")).expanduser()
    try:
        profiles = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or profiles.get("active", "ephemeral")
    return profiles.get("profiles", {}).get(active, {}).get("PREFECT_API_URL") or None


# Resolved here, before any fork: the child only calls it (no dynamic loading between fork and exec).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with_parent(parent: int) -> None:
    """preexec_fn of the server: SIGKILL it when the process that started it dies, however that happens."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    """`with BackgroundServer() as server:` starts a server unless an API is configured; `server.wait()` (after
    importing the flows) blocks until it is healthy and points this process and its children at it; leaving
    the block flushes Prefect's log and event queues and stops the server."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._log_dir = tempfile.TemporaryDirectory(prefix="idflow-prefect-")
        self._log = Path(self._log_dir.name) / "server.log"
        self._settings = ExitStack()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def __enter__(self) -> BackgroundServer:
        if configured_api_url() is None:
            self._spawn()
        return self

    def _spawn(self) -> None:
        """`uvicorn` on Prefect's app factory, as Prefect's ephemeral server does (services that need a
        long-lived server, like the scheduler, stay off), with the UI off."""
        spec = importlib.util.find_spec("prefect")
        assert spec is not None and spec.origin is not None, "prefect is a dependency of idflow"
        self.port = _free_port()
        env = {**os.environ, "PREFECT_UI_ENABLED": "false", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1", "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        env.pop("PREFECT_API_URL", None)
        with self._log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(spec.origin).parent.parent), "--factory",
                 "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(self.port),
                 "--log-level", "error", "--lifespan", "on"],
                env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=lambda parent=os.getpid(): _die_with_parent(parent))  # noqa: PLW1509 (no threads yet)

    def wait(self) -> str | None:
        """Block until the server answers `/api/health`, then set PREFECT_API_URL for this process (a Prefect
        settings context) and its children (the environment). Returns the API URL the run uses."""
        from prefect.settings import get_current_settings
        from prefect.settings import PREFECT_API_URL, temporary_settings
        from prefect.settings.models.server.ephemeral import ServerEphemeralSettings

        settings = get_current_settings()
        if self.proc is None or settings.api.url:  # configured (also in .env or prefect.toml): use that one
            self.stop()
            if settings.api.url and (why := unreachable(settings.api.url)):
                raise ServerStartError(f"the Prefect API at {_without_userinfo(settings.api.url)} does not answer "
                                       f"({why}): start it (`prefect server start`), or unset PREFECT_API_URL "
                                       "to let idflow start a temporary one")
            return settings.api.url
        default = ServerEphemeralSettings.model_fields["startup_timeout_seconds"].default
        chosen = settings.server.ephemeral.startup_timeout_seconds
        timeout = chosen if TIMEOUT_VAR in os.environ or chosen != default else STARTUP_TIMEOUT_S
        deadline = time.monotonic() + timeout
        while not healthy(self.api_url):
            code = self.proc.poll()
            if code == PORT_IN_USE:
                self._spawn()
            elif code is not None:
                self.stop()
                raise ServerStartError(f"the temporary Prefect server exited with code {code} before it was "
                                       f"ready ({self._last_line()}); set PREFECT_API_URL to use a running server")
            if time.monotonic() > deadline:
                last = self._last_line()
                self.stop()
                raise ServerStartError(f"the temporary Prefect server was not ready after {timeout} s ({last}): "
                                       f"set {TIMEOUT_VAR} to wait longer, or PREFECT_API_URL to use a running "
                                       "server")
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
        """Flush what Prefect still queues for the server (up to `drain_s` per queue), then stop the server
        (SIGTERM, then SIGKILL)."""
        if self.proc is None:
            return
        if os.environ.get("PREFECT_API_URL") == self.api_url:
            _drain_prefect_queues(drain_s)
            del os.environ["PREFECT_API_URL"]
        self._settings.close()
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:  # a run being terminated (SIGTERM, Ctrl-C) does not wait long for its last logs
            self.stop(drain_s=10.0 if exc_type is None else 2.0)
        finally:
            self._log_dir.cleanup()


def _drain_prefect_queues(timeout: float) -> None:
    """Send the logs and events Prefect still holds before their server goes away (else they fail at exit)."""
    if "prefect.logging.handlers" in sys.modules:
        sys.modules["prefect.logging.handlers"].APILogWorker.drain_all(timeout=timeout)
    if "prefect.events.worker" in sys.modules:
        sys.modules["prefect.events.worker"].EventsWorker.drain_all(timeout=timeout)
