"""Shared fixtures, and the tier markers. Third-party specimens live outside the repo in ../shared/realdata (never
copied in).

Every test lives in one tier folder (tests/README.md): tests/unit, tests/integration or tests/realdata. Each test is
marked with its folder's name, so `pytest -m unit` selects what `pytest tests/unit` runs.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.support.browser import BrowserBinaries

REPO = Path(__file__).resolve().parent.parent  # computed here, not imported: this file must load on its own
TIERS = ("unit", "integration", "realdata")


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C (SIGINT) is heard again when the suite was started with it ignored (a background job of a script,
    `cmd &`, starts so), since every process a test starts would inherit it ignored: a Prefect worker turns the
    SIGTERM that stops it into a SIGINT to itself, and ignoring that, it waited out the whole stop grace (20 s).

    With as many test workers as cores, each worker (and what it starts) runs on a core of its own: ONNX Runtime
    sizes its thread pool from the cores a process may use and its threads spin while they wait, so two workers
    each running a pool as wide as the machine slow each other down.

    Before the workers start, the checkout is compiled once (`_compile_project`)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if worker is None:
        _compile_project()
    if worker is None or not hasattr(os, "sched_setaffinity"):
        return
    cores = sorted(os.sched_getaffinity(0))
    if count >= len(cores) > 1:
        os.sched_setaffinity(0, {cores[int(worker.removeprefix("gw")) % len(cores)]})


def _compile_project() -> None:
    """Compile the checkout's Python files once, before the test workers start (a file compiled already is
    skipped). Why: where `PYTHONDONTWRITEBYTECODE` is set (this CI machine sets it) no process writes what it
    compiles, so each of the suite's few hundred Python processes (runs, servers, workers) compiled the project
    again, about 0.5 s of CPU each; compiled files written here are read by all of them."""
    import compileall

    for folder in ("pipeline", "flows", "idflow", "synth", "tools", "tests", "bench"):
        if (REPO / folder).is_dir():
            compileall.compile_dir(REPO / folder, quiet=2)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the tier folder it lives in (a test outside every tier gets no tier marker)."""
    tests = Path(__file__).resolve().parent
    for item in items:
        parts = item.path.resolve().relative_to(tests).parts if item.path.resolve().is_relative_to(tests) else ()
        if len(parts) > 1 and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))


def _realdata_dir() -> Path | None:
    candidates = [os.environ.get("IDFLOW_REALDATA"), REPO.parent / "shared" / "realdata"]
    for c in candidates:
        if c and (Path(c) / "eval_manifest.json").is_file():
            return Path(c)
    return None


def _missing(message: str, required_by: str) -> None:
    """Skip the test for want of something outside the repo, or fail it when the environment variable
    `required_by` is 1 (CI sets it, so a missing dependency there is a failure, never a quiet skip)."""
    if os.environ.get(required_by) == "1":
        pytest.fail(f"{message}, and {required_by}=1 requires it", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def realdata_dir() -> Path:
    """The real specimens; missing, the tests using them skip, or fail when IDFLOW_REQUIRE_REALDATA=1 (CI)."""
    d = _realdata_dir()
    if d is None:
        _missing("../shared/realdata not present (set IDFLOW_REALDATA)", "IDFLOW_REQUIRE_REALDATA")
    return d


@pytest.fixture(scope="session")
def browser_binaries() -> BrowserBinaries:
    """Chromium and chromedriver for the UI tests; missing, those tests skip, or fail when IDFLOW_REQUIRE_BROWSER=1
    (CI, which installs them)."""
    from tests.support.browser import find_browser  # here, not at the top: this file must load on its own

    found = find_browser()
    if found is None:
        _missing("chromium/chromedriver not installed (apt-get install chromium chromium-driver)",
                 "IDFLOW_REQUIRE_BROWSER")
    return found


@pytest.fixture(scope="session", autouse=True)
def _shared_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tell `tests.support.prefect_database` the folder both test workers of this run share (the parent of a
    worker's base temp folder), where the set-up Prefect database is made once."""
    from tests.support import prefect_database  # here, not at the top: this file must load on its own

    base = tmp_path_factory.getbasetemp()
    prefect_database.SHARED = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def prefect_api():
    """A real Prefect API for flow tests (temporary SQLite database, server subprocess on loopback)."""
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=120):
        from prefect.settings import PREFECT_API_URL

        yield PREFECT_API_URL.value()


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    return REPO / "data" / "sample"


@pytest.fixture
def serve(request):
    """Start test chat-completions servers on loopback (key: the test module's KEY); all stopped afterwards."""
    from tests.support.chat_server import ChatServer, ServerConfig

    servers = []

    def start(**config):
        servers.append(ChatServer(ServerConfig(api_key=request.module.KEY, **config)).start())
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
