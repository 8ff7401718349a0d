"""Real processes on loopback for end-to-end tests: a `prefect server start` with its own SQLite database and
home, and a process group per started command so every child (workers, flow-run subprocesses) is killed in
`finally`. Moved here from test_ops_e2e.py so the Dask and sharding tests share it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from flows.local_server import healthy

REPO = Path(__file__).resolve().parent.parent.parent
BIN = Path(sys.executable).parent


def _deliver_queued_events(timeout_s: float = 30.0) -> None:
    """Send the events this test process has queued (a flow run in-process emits them) while their server is still
    up. Queued for a server that is gone, they are retried by the Prefect test harness's drain at the end of the
    session: 45 s of the suite's time with two such stacks. Each worker is made again when next needed."""
    from prefect.events.worker import EventsWorker

    EventsWorker.drain_all(timeout=timeout_s, at_exit=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition: Callable[[], Any], timeout: float, what: str, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class Stack:
    """Processes of one test module, logging to files under `tmp`; `url` is the Prefect server's UI root."""

    url: str  # http://127.0.0.1:PORT
    env: dict[str, str]
    tmp: Path
    procs: dict[str, subprocess.Popen]

    @property
    def api(self) -> str:
        return f"{self.url}/api"

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.tmp / f"{name}.log").open("wb")
        proc = subprocess.Popen([*args], env=env or self.env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.procs[name] = proc
        return proc

    def idflow(self, name: str, *args: str) -> subprocess.Popen:
        return self.start(name, sys.executable, "-m", "idflow", *args)

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)

    def kill(self, name: str) -> None:
        """SIGKILL the whole process group: a crash, not a shutdown."""
        proc = self.procs.pop(name)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def stop_all(self, hub: str = "server") -> None:
        """Every process but the `hub` told to stop at once, sharing one grace period (a loaded machine's Prefect
        workers may each take all of it: one after the other they took 40 s of a test file's teardown), then the
        hub, which they talk to while stopping (a Prefect server; a Dask scheduler, whose workers stopped with it
        waited out the whole grace to say goodbye)."""
        _deliver_queued_events()
        others = [name for name in self.procs if name != hub]
        for name in others:
            proc = self.procs[name]
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):  # it may end between the two calls
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for name in others:
            proc = self.procs.pop(name)
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        self.stop(hub)

    def log(self, name: str) -> str:
        path = self.tmp / f"{name}.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def alive(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.poll() is None, f"{name} exited with {proc.returncode}:\n{self.log(name)}"

    def call(self, fn: Callable[..., Any]) -> Any:
        """Run `async fn(client)` against this server from the test process."""
        return call_api(self.api, fn)


def call_api(api: str, fn: Callable[..., Any]) -> Any:
    """Run `async fn(client)` against the Prefect API at `api` from the test process."""
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    async def main() -> Any:
        with temporary_settings({PREFECT_API_URL: api}):
            async with get_client() as client:
                return await fn(client)

    return asyncio.run(main())


S = TypeVar("S", bound=Stack)


@contextmanager
def prefect_server(tmp: Path, stack_class: type[S] = Stack, *, set_up_database: bool = True,
                   **fields: Any) -> Iterator[S]:
    """A `prefect server start` on a free loopback port with a database of its own (a copy of one a server has
    set up, unless `set_up_database` is False: `tests/support/prefect_database.py`); yields the stack (extra
    dataclass fields of `stack_class` from `fields`) and stops every process the stack started, last started
    first."""
    from tests.support.prefect_database import copy_set_up_database

    if set_up_database:
        copy_set_up_database(tmp / "prefect.db")
    stack = server_stack(tmp, stack_class, **fields)
    try:
        start_server(stack)
        with _events_to(stack.api):
            yield stack
    finally:
        stack.stop_all()


def server_stack(tmp: Path, stack_class: type[S] = Stack, **fields: Any) -> S:
    """A stack (nothing started yet) for a Prefect server on a free loopback port, its database `tmp/prefect.db`."""
    port = free_port()
    env = {**os.environ,
           "PREFECT_HOME": str(tmp / "prefect-home"),
           "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{tmp / 'prefect.db'}",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_UI_ENABLED": "true",
           "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
           "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false",
           "PREFECT_RUNNER_POLL_FREQUENCY": "2",
           "PREFECT_LOGGING_LEVEL": "INFO",
           "PWD": str(REPO)}
    return stack_class(url=f"http://127.0.0.1:{port}", env=env, tmp=tmp, procs={}, **fields)


def start_server(stack: Stack) -> None:
    """Start the stack's `prefect server start` (process "server") and wait until it answers."""
    port = stack.url.rsplit(":", 1)[1]
    stack.start("server", str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", port)
    wait_for(lambda: healthy(stack.api) or stack.alive("server"), 240, "the Prefect server")


@contextmanager
def _events_to(api: str) -> Iterator[None]:
    """Events this test process emits go to `api` while the stack is up (the flows the test runs in-process).

    Why: Prefect keeps one events worker a process for every server given by PREFECT_API_URL, made with the URL
    set when it started. An earlier test's server, stopped since, would otherwise still receive this stack's
    events: each one failed, and the drain at the end waited out its timeout for them."""
    from prefect.events.clients import PrefectEventsClient
    from prefect.events.worker import EventsWorker

    EventsWorker.set_client_override(PrefectEventsClient, api_url=api)
    try:
        yield
    finally:  # what it queued is delivered by `stop_all`, before the server stops
        EventsWorker.set_client_override(None)
