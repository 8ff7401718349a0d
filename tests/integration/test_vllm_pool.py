"""The vLLM pool on CPU with real processes: the launcher starts the project's chat-completions test server
(tests/support/chat_server.py) in place of `vllm serve`, and VllmPoolBackend routes real HTTP requests to them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Callable, Iterator

import httpx
import pytest
from typer.testing import CliRunner

from pipeline.datamodel import Extraction, Failure, Reason
from pipeline.extract.model.openai_compat import OpenAICompatBackend
from pipeline.extract.model.vllm_pool import VllmPoolBackend
from pipeline.settings import OpenAISettings, VllmSettings
from pipeline.store.atomic import write_json_atomic
from pipeline.vllm import launcher
from pipeline.vllm.command import ServerSpec
from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.pages import make_page
from tests.support.paths import REPO
from tests.support.prefect_server import wait_for

KEY = "sk-pool-test-5d1e9a"
MODEL = "qwen3.5-2b"

LaunchPool = Callable[..., list[launcher.ServerProcess]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chat_spec(name: str, port: int, latency: float) -> ServerSpec:
    """The test server as the launcher's server command (its key on the command line: it is a test key)."""
    return ServerSpec(name=name, argv=[sys.executable, "-m", "tests.support.chat_server", "--port", str(port),
                                       "--base-path", "/v1", "--latency", str(latency), "--api-key", KEY,
                                       "--model", MODEL],
                      env={"PYTHONPATH": str(REPO)}, host="127.0.0.1", port=port, key_env=None)


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def launch_pool(state_dir: Path) -> Iterator[LaunchPool]:
    """Start N test servers through the launcher; whatever happens, `down` stops them at the end."""
    def launch(n: int, latency: float = 0.05) -> list[launcher.ServerProcess]:
        specs = [chat_spec(f"gpu{i}", free_port(), latency) for i in range(n)]
        result = launcher.up(specs, state_dir=state_dir, api_key=KEY, model=MODEL, max_pixels=1_048_576, patch=32,
                             startup_timeout_s=30, stall_after_s=30, poll_s=0.1)
        assert not result.failed, result.failed
        return result.ready

    yield launch
    launcher.down(state_dir, timeout_s=5)


def pool_settings(state_dir: Path, **overrides: object) -> VllmSettings:
    values: dict[str, object] = dict(state_dir=state_dir, api_key=KEY, per_endpoint_concurrency=4,
                                     attempts_per_endpoint=2, eject_after=2, probe_after_s=30.0)
    return VllmSettings(**{**values, **overrides})


def request_settings(**overrides: object) -> OpenAISettings:
    # the embedded second reading is off: this file is about routing (test_vlm_crosscheck.py is about the reading)
    values: dict[str, object] = dict(base_url="http://unused.invalid", api_key=KEY, model=MODEL, timeout_s=3.0,
                                     max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05, crosscheck=False)
    return OpenAISettings(**{**values, **overrides})


def server_stats(server: launcher.ServerProcess) -> dict:
    return httpx.get(f"{server.root_url}/stats", timeout=5).json()


def assert_one_per_page(pages: list, results: list) -> None:
    assert len(results) == len(pages)
    assert [r.ref.key if isinstance(r, Extraction) else f"{r.sha256}:{r.page}" for r in results] == \
        [p.ref.key for p in pages]


def test_load_spreads_across_endpoints(launch_pool: LaunchPool, state_dir: Path) -> None:
    servers = launch_pool(3, latency=0.1)
    pool = VllmPoolBackend.from_settings(pool_settings(state_dir), request_settings(), concurrency=4)
    pages = [make_page(i) for i in range(36)]

    async def go() -> list[Extraction | Failure]:
        try:
            return await pool.extract(pages)
        finally:
            await pool.aclose()

    results = asyncio.run(go())
    assert_one_per_page(pages, results)
    assert all(isinstance(r, Extraction) and r.backend == "vllm" and r.attempts == 1 for r in results)
    by_endpoint = Counter(r.endpoint for r in results)
    assert set(by_endpoint) == {s.base_url for s in servers}
    assert min(by_endpoint.values()) >= 8, by_endpoint  # 36 pages over 3 servers of 4 slots: about 12 each
    for server in servers:
        stats = server_stats(server)
        assert stats["chat_requests"] == by_endpoint[server.base_url] + 1  # + the readiness request
        assert 2 <= stats["peak_in_flight"] <= 4  # concurrent, and the per-endpoint cap holds
    # The pool wrote its counters for `idflow vllm status`.
    rows = launcher.status(state_dir)
    assert [r.pool["served"] for r in rows] == [by_endpoint[s.base_url] for s in servers]


def test_server_killed_mid_run_loses_no_document(launch_pool: LaunchPool, state_dir: Path) -> None:
    servers = launch_pool(3, latency=0.3)
    victim = servers[0]
    pool = VllmPoolBackend.from_settings(pool_settings(state_dir), request_settings(), concurrency=4)
    pages = [make_page(i) for i in range(48)]

    async def go() -> list[Extraction | Failure]:
        async def kill_soon() -> None:
            while pool.endpoints[0].in_flight < 4:  # the victim is busy: its requests are in flight
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)
            os.killpg(victim.pid, signal.SIGKILL)

        killer = asyncio.create_task(kill_soon())
        try:
            return await pool.extract(pages)
        finally:
            await killer
            await pool.aclose()

    results = asyncio.run(go())
    assert_one_per_page(pages, results)
    assert all(isinstance(r, Extraction) for r in results), [r for r in results if isinstance(r, Failure)]
    survivors = {s.base_url for s in servers[1:]}
    moved = [r for r in results if r.attempts > 1]
    assert len(moved) >= 4 and all(r.endpoint in survivors for r in moved)  # its in-flight pages went elsewhere
    assert pool.retried_elsewhere >= 4
    victim_endpoint = pool.endpoints[0]
    assert victim_endpoint.url == victim.base_url and not victim_endpoint.healthy
    assert victim_endpoint.ejections == 1
    served = sum(server_stats(s)["chat_requests"] - 1 for s in servers[1:])
    assert served == sum(r.endpoint in survivors for r in results)


def test_all_servers_down_falls_back_or_queues_retryable_failures(launch_pool: LaunchPool,
                                                                  state_dir: Path) -> None:
    servers = launch_pool(2)
    launcher.down(state_dir, timeout_s=5)  # the pool file goes with them: name their endpoints explicitly
    endpoints = [s.base_url for s in servers]
    pages = [make_page(i) for i in range(6)]

    def run(fallback: OpenAICompatBackend | None) -> tuple[list[Extraction | Failure], VllmPoolBackend]:
        async def go() -> tuple[list[Extraction | Failure], VllmPoolBackend]:
            pool = VllmPoolBackend(endpoints, model=MODEL, api_key=KEY, pool=pool_settings(state_dir),
                                   request=request_settings(), fallback=fallback)
            try:
                return await pool.extract(pages), pool
            finally:
                await pool.aclose()
        return asyncio.run(go())

    results, pool = run(None)
    assert_one_per_page(pages, results)
    for r in results:
        assert isinstance(r, Failure) and r.reason == Reason.ENDPOINT_UNAVAILABLE and r.retryable
        assert r.stage == "request" and r.backend == "vllm" and "no healthy vLLM endpoint" in r.detail
    assert all(not e.healthy for e in pool.endpoints) and pool.unavailable == len(pages)

    with ChatServer(ServerConfig(api_key="sk-api-fallback", model="hosted-vlm")) as api:
        fallback = OpenAICompatBackend(OpenAISettings(base_url=api.base_url, api_key="sk-api-fallback",
                                                      model="hosted-vlm", backoff_base_s=0.01), concurrency=2)
        results, pool = run(fallback)
        assert_one_per_page(pages, results)
        assert all(isinstance(r, Extraction) and r.backend == "openai" and r.endpoint == api.base_url
                   and r.model == "hosted-vlm" for r in results)
        assert pool.sent_to_fallback == len(pages) and len(api.chat_requests()) == len(pages)


def test_ejected_endpoint_is_probed_back_in(launch_pool: LaunchPool, state_dir: Path) -> None:
    [server] = launch_pool(1)
    port = free_port()
    pool_cfg = pool_settings(state_dir, probe_after_s=0.2, eject_after=1)

    async def go() -> None:
        pool = VllmPoolBackend([f"http://127.0.0.1:{port}/v1", server.base_url], model=MODEL, api_key=KEY,
                               pool=pool_cfg, request=request_settings())
        try:
            first = await pool.extract([make_page(i) for i in range(4)])
            assert all(isinstance(r, Extraction) and r.endpoint == server.base_url for r in first)
            assert not pool.endpoints[0].healthy
            with ChatServer(ServerConfig(api_key=KEY, model=MODEL, base_path="/v1"), port=port):
                await asyncio.sleep(0.3)  # past the cooldown: the next routing probes /health
                second = await pool.extract([make_page(i) for i in range(4, 12)])
                assert pool.endpoints[0].healthy
                assert {r.endpoint for r in second} == {f"http://127.0.0.1:{port}/v1", server.base_url}
        finally:
            await pool.aclose()

    asyncio.run(go())


def test_up_status_down_lifecycle_stops_only_our_processes(launch_pool: LaunchPool, state_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    servers = launch_pool(2)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        pids = launcher.read_pids(state_dir)
        assert [p.pid for p in pids] == [s.pid for s in servers]
        assert (state_dir / "pool.json").is_file()
        # A second `up` on the same state dir or ports is refused before anything starts.
        again = [chat_spec("gpu0", servers[0].port, 0.0)]
        problems = launcher.preflight(again, state_dir)
        assert any("still running" in p for p in problems)
        assert any(f"port {servers[0].port} is taken by pid {servers[0].pid}" in p for p in problems)

        from idflow.vllm import vllm_app

        monkeypatch.setenv("IDFLOW_VLLM_STATE_DIR", str(state_dir))
        shown = CliRunner().invoke(vllm_app, ["status"])
        assert shown.exit_code == 0, shown.output
        assert all(s.name in shown.output and str(s.pid) in shown.output for s in servers)
        assert [(r.running, r.healthy) for r in launcher.status(state_dir)] == [(True, True)] * 2

        # A pid file entry whose pid was reused by another process is left alone.
        foreign = launcher.ServerProcess("other", bystander.pid, 1, "127.0.0.1", 1, "", "", "")
        assert "left alone" in launcher.stop_server(foreign, timeout_s=1)

        stopped = CliRunner().invoke(vllm_app, ["down"])
        assert stopped.exit_code == 0, stopped.output
        assert stopped.output.count("stopped") == 2
        assert all(not launcher.group_alive(s.pid) for s in servers)
        assert bystander.poll() is None  # not ours: still running
        assert not (state_dir / "pids.json").exists() and not (state_dir / "pool.json").exists()
        assert CliRunner().invoke(vllm_app, ["status"]).exit_code == 1
    finally:
        bystander.kill()
        bystander.wait()


def test_down_kills_a_server_that_ignores_sigterm(state_dir: Path) -> None:
    stubborn = ServerSpec(name="gpu0", argv=[sys.executable, "-c", "import signal, time; "
                                             "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                                             "time.sleep(60)"], env={}, host="127.0.0.1", port=free_port())
    [(server, popen)] = launcher.start([stubborn], state_dir, api_key=KEY)
    try:  # "up" is printed once SIGTERM is ignored
        wait_for(lambda: "up" in Path(server.log).read_text(), 60, "the server's handler", every=0.05)
        messages: list[str] = []
        assert launcher.down(state_dir, timeout_s=0.5, report=messages.append) == 1
        assert "killed after 0.5 s" in messages[0]
        assert popen.poll() is not None
    finally:
        if popen.poll() is None:
            popen.kill()
            popen.wait()


def test_endpoints_from_environment_or_pool_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("IDFLOW_VLLM_ENDPOINTS", "IDFLOW_VLLM_MODEL", "IDFLOW_VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDFLOW_VLLM_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no developer .env
    with pytest.raises(ValueError, match="idflow vllm up"):
        VllmSettings().resolve_pool()
    assert VllmSettings().served_model == ""
    write_json_atomic(tmp_path / "pool.json", {"model": "qwen", "endpoints": ["http://127.0.0.1:8004/v1"],
                                               "pids": [1]})
    config = VllmSettings().resolve_pool()
    assert (config.endpoints, config.model, VllmSettings().served_model) == (["http://127.0.0.1:8004/v1"], "qwen",
                                                                             "qwen")
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", "http://gpu-a:8004/v1/, http://gpu-b:8004/v1")
    with pytest.raises(ValueError, match="IDFLOW_VLLM_MODEL"):
        VllmSettings().resolve_pool()
    monkeypatch.setenv("IDFLOW_VLLM_MODEL", "qwen-env")
    config = VllmSettings().resolve_pool()
    assert config.endpoints == ["http://gpu-a:8004/v1", "http://gpu-b:8004/v1"] and config.model == "qwen-env"
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", "http://gpu-a:8004/v1,notaurl")  # was taken, then never answered
    with pytest.raises(ValueError, match="notaurl is not an http"):
        VllmSettings().resolve_pool()
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", "http://gpu-a:8004/v1/, http://gpu-b:8004/v1")
    with pytest.raises(ValueError, match="IDFLOW_VLLM_API_KEY"):
        VllmPoolBackend.from_settings(VllmSettings(), request_settings(), concurrency=1)
