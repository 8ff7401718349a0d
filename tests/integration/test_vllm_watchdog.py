"""The start-up watchdog: parsing vLLM's encoder-cache line, and real processes whose log stops after it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from pipeline.vllm import launcher
from pipeline.vllm.command import ServerSpec
from pipeline.vllm.watchdog import (EncoderBudget, LogWatchdog, StartupWatch, check_budget, parse_encoder_budget,
                                    stall_diagnosis, stage_of)
from tests.support.paths import REPO
from tests.support.prefect_server import wait_for

# As logged by vLLM (the user's report in shared/seed and the reference).
STALLED = ("(EngineCore_DP0 pid=2340912) INFO 11-03 10:00:01 [gpu_model_runner.py:3200] Encoder cache will be "
           "initialized with a budget of 16384 tokens, and profiled with 1 image items of the maximum feature size.")
HEALTHY = ("INFO 11-03 10:00:01 [gpu_model_runner.py:3200] Encoder cache will be initialized with a budget of 16384 "
           "tokens, and profiled with 16 image items of the maximum feature size.")
MAX_PIXELS, PATCH = 1_048_576, 32


def test_parse_encoder_line() -> None:
    assert parse_encoder_budget(STALLED) == EncoderBudget(16384, 1, "image")
    assert parse_encoder_budget(HEALTHY) == EncoderBudget(16384, 16, "image")
    assert parse_encoder_budget("Loading weights took 2.43 seconds") is None
    assert EncoderBudget(16384, 16, "image").item_tokens_range == (964, 1024)
    assert EncoderBudget(16384, 1, "image").item_tokens_range == (8193, 16384)


@pytest.mark.parametrize(("budget", "items", "kind"), [
    (16384, 1, "ignored"),  # the checkpoint's 4096x4096 dummy: max_pixels never arrived
    (16384, 16, "ok"),  # 16 items of 1024 tokens
    (8192, 8, "ok"),  # default batched tokens on big GPUs
    (2048, 2, "ok"),  # small GPUs
    (1024, 1, "ok"),  # max_num_batched_tokens below one image: budget = one item
    (16384, 64, "below_pipeline"),  # the server allows 256-token images, the pipeline sends 1024
])
def test_budget_verdict(budget: int, items: int, kind: str) -> None:
    verdict = check_budget(EncoderBudget(budget, items, "image"), MAX_PIXELS, PATCH)
    assert verdict.kind == kind
    assert "the pipeline sends at most 1,024" in verdict.message


def test_stall_diagnosis_says_what_to_change() -> None:
    ignored = stall_diagnosis(EncoderBudget(16384, 1, "image"), MAX_PIXELS, PATCH, 200)
    assert "profiling the vision encoder with 1 dummy image(s) of the maximum size" in ignored
    assert "did NOT take effect" in ignored and "16,777,216 pixels" in ignored
    assert """--mm-processor-kwargs '{"max_pixels": 1048576}'""" in ignored and "longest_edge" in ignored
    assert "--mm-encoder-tp-mode data" in ignored
    slow = stall_diagnosis(EncoderBudget(16384, 16, "image"), MAX_PIXELS, PATCH, 200)
    assert "max_pixels took effect" in slow and "TORCH_SDPA" in slow and "py-spy" in slow


def test_startup_watch_reports_stages_once_and_a_stall_once_per_silence() -> None:
    now = [0.0]
    watch = StartupWatch("gpu0", max_pixels=MAX_PIXELS, patch=PATCH, stall_after_s=60, clock=lambda: now[0])
    assert watch.feed("Loading safetensors checkpoint shards: 100% Completed") == ["gpu0: loading weights"]
    assert watch.feed("Loading safetensors checkpoint shards: 100% Completed") == []
    said = watch.feed(STALLED)
    assert said[0] == "gpu0: profiling the vision encoder" and "did NOT take effect" in said[1]
    now[0] = 59
    assert watch.check() is None
    now[0] = 61
    assert "no log output for 61 s after the encoder-cache line" in (watch.check() or "")
    assert watch.check() is None  # said once
    assert watch.feed("RuntimeError: CUDA error: out of memory")[-1].startswith("gpu0: error in the log")
    now[0] = 200
    assert "no log output for 139 s after the encoder-cache line" in (watch.check() or "")
    watch.feed("INFO Starting vLLM API server 0 on http://127.0.0.1:8004")
    now[0] = 300
    assert watch.check() is None  # quiet is normal once serving
    watch.stage = "sizing the KV cache"
    assert watch.check() == "gpu0: no log output for 100 s (stage: sizing the KV cache)"
    assert stage_of("INFO Uvicorn running on http://127.0.0.1:8004") == "serving"


@pytest.fixture
def run_script(tmp_path: Path) -> Iterator:
    """Run a Python snippet with its output in a log file, as the launcher runs servers; always killed."""
    processes: list[subprocess.Popen[bytes]] = []

    def start(code: str) -> Path:
        log = tmp_path / f"server{len(processes)}.log"
        with log.open("wb") as out:
            processes.append(subprocess.Popen([sys.executable, "-u", "-c", code], stdout=out,
                                              stderr=subprocess.STDOUT))
        return log

    yield start
    for process in processes:
        process.kill()
        process.wait()


def hang_after(line: str) -> str:
    return ("import time\n"
            "print('INFO Loading safetensors checkpoint shards: 100% Completed | 1/1')\n"
            "print('INFO Model loading took 4.25 GiB memory and 3.39 seconds')\n"
            f"print({line!r})\n"
            "time.sleep(60)\n")


def watch_until_diagnosis(log: Path, stall_after_s: float = 0.5, within_s: float = 10.0,
                          after: str | None = None) -> tuple[list[str], list[str]]:
    """Watch `log` until the first diagnosis; with `after`, only once the script has printed that line (a slow
    interpreter start would otherwise be the stall that is diagnosed)."""
    if after is not None:
        wait_for(lambda: after in log.read_text(errors="replace"), 120, f"the script to print {after!r}", every=0.05)
    said: list[str] = []
    watch = StartupWatch("gpu0", max_pixels=MAX_PIXELS, patch=PATCH, stall_after_s=stall_after_s)
    with LogWatchdog(log, watch, said.append, poll_s=0.05) as dog:
        deadline = time.monotonic() + within_s
        while not dog.diagnoses and time.monotonic() < deadline:
            time.sleep(0.05)
    return said, dog.diagnoses


def test_watchdog_fires_on_a_server_stalled_without_max_pixels(run_script) -> None:
    said, diagnoses = watch_until_diagnosis(run_script(hang_after(STALLED)), after=STALLED)
    assert len(diagnoses) == 1
    assert said[:3] == ["gpu0: loading weights", "gpu0: weights loaded", "gpu0: profiling the vision encoder"]
    assert "max_pixels 1,048,576 did NOT take effect" in said[3]
    assert "after the encoder-cache line" in diagnoses[0] and "--mm-processor-kwargs" in diagnoses[0]


def test_watchdog_on_a_healthy_budget_line_blames_the_encoder_not_max_pixels(run_script) -> None:
    said, diagnoses = watch_until_diagnosis(run_script(hang_after(HEALTHY)), after=HEALTHY)
    assert "max_pixels took effect" in said[3]
    assert len(diagnoses) == 1 and "did NOT" not in diagnoses[0] and "TORCH_SDPA" in diagnoses[0]


def test_a_moving_progress_bar_is_not_a_stall(run_script) -> None:
    bar = ("import sys, time\n"
           f"print({STALLED!r})\n"
           "for i in range(30):\n"
           "    sys.stdout.write(f'\\rCapturing CUDA graphs: {i}/30'); sys.stdout.flush(); time.sleep(0.05)\n"
           "time.sleep(60)\n")
    said, diagnoses = watch_until_diagnosis(run_script(bar), stall_after_s=0.6, within_s=1.2)
    assert diagnoses == [] and "gpu0: compiling / capturing CUDA graphs" in said


def test_launcher_reports_the_stall_and_the_server_still_joins_when_it_recovers(tmp_path: Path) -> None:
    """Through `launcher.up` with the stand-in `vllm serve` (no max_pixels: the 16384-token dummy), silent for
    1.5 s after the encoder-cache line: the watchdog speaks while `up` waits, then readiness succeeds."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fake = REPO / "tests" / "support" / "fake_vllm.py"
    spec = ServerSpec("gpu0", [sys.executable, str(fake), "serve", "/models/Qwen3.5-2B", "--port", str(port),
                               "--served-model-name", "qwen"], env={"FAKE_VLLM_STALL_S": "1.5"},
                      host="127.0.0.1", port=port)
    said: list[str] = []
    state = tmp_path / "state"
    try:
        result = launcher.up([spec], state_dir=state, api_key="sk-watchdog-test", model="qwen",
                             max_pixels=MAX_PIXELS, patch=PATCH, startup_timeout_s=30, stall_after_s=0.5,
                             report=said.append, poll_s=0.1)
    finally:
        launcher.down(state, timeout_s=5)
    assert [s.name for s in result.ready] == ["gpu0"] and not result.failed
    assert len(result.diagnoses) == 1 and "did NOT take effect" in result.diagnoses[0]
    assert said.index(result.diagnoses[0]) < said.index(f"gpu0: ready at http://127.0.0.1:{port}/v1")
