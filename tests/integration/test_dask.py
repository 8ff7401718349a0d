"""Dask mode on a real cluster on loopback: `dask scheduler` and two single-threaded `dask worker` processes
started here, the `extract-folder` flow against the test Prefect server. Every document is processed once, both
workers produce rows, and a worker SIGKILLed in the middle of a batch loses and duplicates nothing.

The pages are read by a loopback model answering from the generated set's truth, slowly enough (`LATENCY_S` an
answer, one request at a time) that no batch is instant, so the flow, polling every 0.2 s, finds a worker mid-batch
once both have produced rows. What is proven is Dask's side (distribution, a lost worker's batch rerun once), the
same for every backend; the embedded reader loading in each worker and reading every page with it took minutes and
proved nothing more. Every process is killed in `finally`.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.limits import ensure_request_limit, request_limit_name
from pipeline.ingest.discover import skip_reason
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from synth.sample_set import build_eval
from tests.support.mistake_server import truth_model
from tests.support.prefect_server import Stack, wait_for

pytestmark = pytest.mark.timeout(900)

DASK = str(Path(sys.executable).parent / "dask")
KEY = "sk-dask-8d04a7"
LATENCY_S = 0.3  # a batch of two pages takes 0.6 s at least, while the flow polls every 0.2 s


@pytest.fixture
def documents(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    build_eval(folder, 16, 7)
    (folder / "manifest.json").rename(tmp_path / "manifest.json")  # ground truth, not a scan
    return folder


@pytest.fixture
def model(documents: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The model endpoint in this process's environment (the flow's), which the workers started after it share:
    a worker whose settings differ from the flow's refuses the batch."""
    with truth_model(tmp_path / "manifest.json", KEY, root=documents, latency_s=LATENCY_S) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        yield


@pytest.fixture
def cluster(tmp_path: Path, prefect_api: str, model: None) -> Iterator[tuple[Stack, str]]:
    """Scheduler on a free port (written to a scheduler file) and workers w1, w2 as separate process groups.
    Workers need the Prefect API (the task engine runs inside them) and read the same IDFLOW_* settings."""
    import os

    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE": "false"}
    stack = Stack(url="", env=env, tmp=tmp_path, procs={})
    scheduler_file = tmp_path / "scheduler.json"
    try:
        stack.start("scheduler", DASK, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                    "--scheduler-file", str(scheduler_file))
        address = wait_for(lambda: scheduler_file.exists() and json.loads(scheduler_file.read_text())["address"]
                           or stack.alive("scheduler"), 60, "the Dask scheduler")
        for name in ("w1", "w2"):
            stack.start(name, DASK, "worker", address, "--name", name, "--nthreads", "1", "--no-nanny",
                        "--host", "127.0.0.1", "--no-dashboard")
        with _client(address) as client:
            client.wait_for_workers(2, timeout=120)
        yield stack, address
    finally:
        stack.stop_all(hub="scheduler")  # the workers first, while their scheduler still answers


def _client(address: str):  # noqa: ANN202 - distributed.Client, imported lazily
    from distributed import Client

    return Client(address, timeout=30)


def _rows(out: Path, name: str, columns: list[str]) -> list[dict[str, Any]]:
    table = read_table(out, name, columns)
    return table.to_pylist() if table is not None else []


@pytest.fixture
def request_limit(prefect_api: str) -> Iterator[None]:
    """A real request limit the workers acquire around their model calls. Two slots: both workers at once; the
    killed worker's slot stays leased until the lease expires, so the survivor still has one. Removed after the
    test so other tests in the session (concurrency 4) are not capped by it."""
    from prefect.client.orchestration import get_client

    asyncio.run(ensure_request_limit("openai", 2))
    yield

    async def remove() -> None:
        async with get_client() as client:
            await client.delete_global_concurrency_limit_by_name(request_limit_name("openai"))

    asyncio.run(remove())


def test_two_workers_one_killed_mid_batch_nothing_lost_or_duplicated(
        cluster: tuple[Stack, str], request_limit: None, documents: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.extract import extract_folder

    stack, address = cluster
    out = tmp_path / "out"
    monkeypatch.setenv("IDFLOW_FLUSH_EVERY", "1")  # each finished batch is a Parquet part at once
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["summary"] = asyncio.run(extract_folder(str(documents), str(out), backend="openai", batch_size=2,
                                                            concurrency=1, dask=address))
        except BaseException as exc:  # reported by the assertion below
            outcome["error"] = exc

    flow = threading.Thread(target=contextvars.copy_context().run, args=(run,))  # keeps the test API settings
    flow.start()
    with _client(address) as client:
        names = {addr: info["name"] for addr, info in client.scheduler_info()["workers"].items()}

        def victim() -> str | None:
            """A worker that already produced rows and is in the middle of a batch now."""
            producers = {r["worker"] for r in _rows(out, RESULTS, ["worker"])}
            busy = [addr for addr, keys in client.processing().items() if keys and addr in producers]
            return busy[0] if producers == set(names) and busy else None

        killed = wait_for(victim, 600, "both workers to produce rows", every=0.2)
        stack.kill(names[killed])
    flow.join(timeout=600)
    assert not flow.is_alive(), "the flow did not finish after the worker was killed"
    assert "error" not in outcome, outcome.get("error")

    summary = outcome["summary"]
    files = sorted(p.relative_to(documents).as_posix() for p in documents.rglob("*") if p.is_file())
    assert summary["accounted"] and summary["seen"] >= len(files)
    results = _rows(out, RESULTS, ["source_path", "page", "sha256", "worker"])
    failures = _rows(out, FAILURES, ["source_path", "page", "reason"])
    keys = [(r["source_path"], r["page"]) for r in results + failures]
    assert len(keys) == len(set(keys)), "a document was written twice"
    assert (len(results), len(failures)) == (summary["results"], summary["failures"])
    to_do = {f for f in files if skip_reason(Path(f).name) is None}  # the set has hidden and partial files too
    assert {r["source_path"] for r in results + failures} == to_do  # nothing lost
    assert "internal_error" not in {f["reason"] for f in failures}  # the killed batch was rerun, not given up
    assert {r["worker"] for r in results} == set(names)  # both workers' addresses, the killed one included
    assert len(results) > len(failures) > 0
