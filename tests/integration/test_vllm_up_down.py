"""`idflow vllm up` -> `status` -> `down` for real, through a stand-in `vllm serve` (tests/support/fake_vllm.py)
started as two child processes on loopback ports."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from idflow.vllm import vllm_app
from pipeline.vllm import launcher
from tests.support.paths import REPO
from tests.unit.test_vllm_command import SECRET, env  # noqa: F401  (env is a fixture)


def free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port = first.getsockname()[1]
            if port < 65535 and not launcher.port_in_use("127.0.0.1", port + 1):
                return port
    raise RuntimeError("no two consecutive free ports")


def test_up_status_down_through_a_stand_in_vllm(env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The whole command path on CPU: help parsing drops a flag this "vLLM" would refuse, the watchdog reads
    the budget line, readiness sends a real chat request, `down` stops both servers."""
    env.setenv("IDFLOW_VLLM_SERVE_COMMAND", f"{sys.executable} {REPO / 'tests' / 'support' / 'fake_vllm.py'} serve")
    env.setenv("FAKE_VLLM_UNKNOWN_FLAGS", "--default-chat-template-kwargs")
    env.setenv("IDFLOW_VLLM_STARTUP_TIMEOUT_S", "60")
    state = tmp_path / "state"
    port = free_port_pair()
    try:
        result = CliRunner().invoke(vllm_app, ["up", "--model", "/models/Qwen3.5-2B", "--gpus", "0,1",
                                               "--port-base", str(port)])
        assert result.exit_code == 0, result.output
        assert "does not know --default-chat-template-kwargs: dropped" in result.stderr
        assert result.stderr.count("max_pixels took effect") == 2  # budget 16384 / 16 items of 1024
        assert "2/2 servers ready" in result.stdout
        pool = json.loads((state / "pool.json").read_text())
        assert pool == {"model": "Qwen3.5-2B", "pids": pool["pids"],
                        "endpoints": [f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port + 1}/v1"]}
        assert SECRET not in result.output + json.dumps(pool) + (state / "pids.json").read_text()
        assert CliRunner().invoke(vllm_app, ["status"]).exit_code == 0
    finally:
        stopped = CliRunner().invoke(vllm_app, ["down"])
    assert stopped.output.count("stopped") == 2
    assert not any(launcher.group_alive(pid) for pid in pool["pids"])
