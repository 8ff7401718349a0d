"""`idflow vllm up`: the commands derived from the pipeline config, flag filtering against the installed vLLM's
help (a real `up` -> `down` through a stand-in `vllm serve` is in tests/integration/test_vllm_up_down.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from idflow.vllm import vllm_app
from pipeline.settings import PrepareSettings, VllmSettings
from pipeline.vllm.command import filter_flags, known_flags, max_model_len, plan

SECRET = "sk-never-printed-8c1f"

ONE_GPU = """\
CUDA_VISIBLE_DEVICES=0 VLLM_API_KEY="$IDFLOW_VLLM_API_KEY" vllm serve Qwen/Qwen3.5-2B \\
  --served-model-name qwen3.5-2b \\
  --host 127.0.0.1 \\
  --port 8004 \\
  --max-model-len 3072 \\
  --limit-mm-per-prompt '{"image": 1, "video": 0}' \\
  --mm-processor-kwargs '{"max_pixels": 1048576}' \\
  --mm-processor-cache-gb 0 \\
  --generation-config vllm \\
  --default-chat-template-kwargs '{"enable_thinking": false}'
"""

# Shapes of real `vllm serve --help=all` output: metavars, aliases, --no- forms, underscores.
FAKE_HELP = """usage: vllm serve [model_tag] [options]
options:
  --host HOST           Host name.
  --port PORT           Port number.
  --served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]
  --max_model_len MAX_MODEL_LEN
  --limit-mm-per-prompt LIMIT_MM_PER_PROMPT
  --mm-processor-kwargs MM_PROCESSOR_KWARGS
  --generation-config GENERATION_CONFIG
  --disable-log-requests
  --enable-prefix-caching, --no-enable-prefix-caching
  --api-server-count API_SERVER_COUNT, -asc API_SERVER_COUNT
"""


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """A clean configuration: defaults, the key set (it must never be printed), `vllm` not installed."""
    for name in ("IDFLOW_MAX_PIXELS", "IDFLOW_PATCH", "IDFLOW_OPENAI_MAX_TOKENS", "IDFLOW_VLLM_PORT_BASE",
                 "IDFLOW_VLLM_HOST", "IDFLOW_VLLM_EXTRA_ARGS", "IDFLOW_VLLM_PROMPT_BUDGET_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("IDFLOW_VLLM_SERVE_COMMAND", "vllm-not-installed-here serve")
    monkeypatch.setenv("IDFLOW_VLLM_API_KEY", SECRET)
    monkeypatch.setenv("IDFLOW_VLLM_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    return monkeypatch


def dry_run(*args: str) -> tuple[str, str]:
    result = CliRunner().invoke(vllm_app, ["up", "--model", "Qwen/Qwen3.5-2B", "--dry-run", *args])
    assert result.exit_code == 0, result.output
    return result.stdout, result.stderr


def test_dry_run_one_gpu_prints_the_exact_command(env: pytest.MonkeyPatch) -> None:
    env.setenv("IDFLOW_VLLM_SERVE_COMMAND", "vllm serve")
    out, err = dry_run("--served-model-name", "qwen3.5-2b")
    assert out == ONE_GPU + "\n"
    assert "flags not checked" in err  # no vLLM here to ask for its flags
    assert SECRET not in out + err


def test_dry_run_four_gpus_follows_the_config(env: pytest.MonkeyPatch) -> None:
    env.setenv("IDFLOW_MAX_PIXELS", "524288")
    env.setenv("IDFLOW_OPENAI_MAX_TOKENS", "384")
    out, _ = dry_run("--gpus", "0,1,2,3", "--port-base", "9100")
    commands = [shlex.split(c.replace("\\\n", " ")) for c in out.strip().split("\n\n")]
    assert len(commands) == 4
    expected_len = max_model_len(PrepareSettings(max_pixels=524_288), prompt_budget=1024, max_tokens=384)
    assert expected_len == 2560  # 512 visual + 2 + 1024 prompt + 2 x 384 answers = 2306, next multiple of 512
    for gpu, argv in enumerate(commands):
        assert argv[:4] == [f"CUDA_VISIBLE_DEVICES={gpu}", "VLLM_API_KEY=$IDFLOW_VLLM_API_KEY",
                            "vllm-not-installed-here", "serve"]
        flags = dict(zip(argv[5::2], argv[6::2], strict=True))
        assert argv[4] == "Qwen/Qwen3.5-2B" and flags["--served-model-name"] == "Qwen3.5-2B"
        assert flags["--port"] == str(9100 + gpu) and flags["--host"] == "127.0.0.1"
        assert flags["--max-model-len"] == str(expected_len)
        assert json.loads(flags["--mm-processor-kwargs"]) == {"max_pixels": 524_288}
        assert json.loads(flags["--limit-mm-per-prompt"]) == {"image": 1, "video": 0}
        assert json.loads(flags["--default-chat-template-kwargs"]) == {"enable_thinking": False}
        assert flags["--mm-processor-cache-gb"] == "0" and flags["--generation-config"] == "vllm"
        assert "--api-key" not in flags and "--enable-log-requests" not in flags


def test_max_model_len_covers_the_largest_page_for_each_patch_size() -> None:
    qwen25 = PrepareSettings(max_pixels=1_003_520, patch=28)  # 1280 tokens of 28x28
    assert max_model_len(qwen25, prompt_budget=1024, max_tokens=256) == 3072  # 1282 + 1024 + 512 = 2818
    assert max_model_len(PrepareSettings(), prompt_budget=512, max_tokens=256) == 2560  # 1026 + 512 + 512


def test_known_flags_reads_real_help_shapes() -> None:
    known = known_flags(FAKE_HELP)
    assert {"--host", "--max-model-len", "--no-enable-prefix-caching", "--api-server-count",
            "--served-model-name"} <= known
    assert "-asc" not in known and "--mm-processor-cache-gb" not in known


def test_unknown_flags_are_dropped_with_their_values() -> None:
    kept, dropped = filter_flags(["--port", "8004", "--mm-processor-cache-gb", "0", "--generation-config=vllm",
                                  "--default-chat-template-kwargs", '{"enable_thinking": false}', "--host", "h"],
                                 known_flags(FAKE_HELP))
    assert kept == ["--port", "8004", "--generation-config=vllm", "--host", "h"]
    assert dropped == ["--mm-processor-cache-gb", "--default-chat-template-kwargs"]


def test_plan_against_an_older_vllm(tmp_path: Path) -> None:
    settings = VllmSettings(state_dir=tmp_path, extra_args="--gpu-memory-utilization 0.85 --api-server-count 2")
    result = plan("/models/Qwen3.5-2B", ["0", "1"], settings, PrepareSettings(), max_tokens=256,
                  help_text=FAKE_HELP)
    assert result.checked and result.served_model_name == "Qwen3.5-2B"
    assert result.dropped == ["--mm-processor-cache-gb", "--default-chat-template-kwargs",
                              "--gpu-memory-utilization"]
    argv = result.specs[1].argv
    assert "--disable-log-requests" in argv  # this version logs requests unless told not to
    assert argv[-2:] == ["--api-server-count", "2"] and "0.85" not in argv
    assert result.specs[1].env == {"CUDA_VISIBLE_DEVICES": "1"} and result.specs[1].port == 8005
