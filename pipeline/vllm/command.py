"""The `vllm serve` command for each GPU, derived from the pipeline's own image budget.

Why derive rather than copy flags from a blog: the pipeline already resizes every page to at most
`max_pixels` (multiples of the patch), so the server's limits can match that budget exactly. Without
`max_pixels` vLLM profiles a 4096x4096 dummy image at start-up (16,384 visual tokens) and appears to hang after
the "Encoder cache will be initialized" line; with it the dummy is the size of our largest real page.

Why filter against `vllm serve --help=all`: flags come and go between vLLM releases (`--disable-log-requests`
was replaced, `--mm-processor-cache-gb` replaced another), and an unknown flag makes the server exit at once.
A flag the installed version does not know is dropped with a warning instead.

The API key is passed as the `VLLM_API_KEY` environment variable, not as `--api-key VALUE`: vLLM reads it
when the flag is absent, and a value on the command line is readable by every local user through `ps`.
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Sequence

from pipeline.settings import PrepareSettings, VllmSettings

KEY_ENV = "VLLM_API_KEY"  # what vLLM reads when --api-key is not given
KEY_PLACEHOLDER = '"$IDFLOW_VLLM_API_KEY"'  # what --dry-run prints instead of the key
VISION_MARKERS = 2  # <|vision_start|> and <|vision_end|> around the image tokens
MODEL_LEN_STEP = 512

_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w.-]*)")


def max_model_len(prepare: PrepareSettings, *, prompt_budget: int, max_tokens: int) -> int:
    """Context for the largest page: its visual tokens, the instruction, and two answers (the repair turn
    sends the first answer back and asks for a second), rounded up to a multiple of 512."""
    visual = prepare.max_pixels // prepare.patch ** 2 + VISION_MARKERS
    need = visual + prompt_budget + 2 * max_tokens
    return math.ceil(need / MODEL_LEN_STEP) * MODEL_LEN_STEP


def known_flags(help_text: str) -> frozenset[str]:
    """Every `--flag` that `vllm serve --help=all` mentions (underscores read as dashes, as vLLM does)."""
    return frozenset(_normalise(m.group(1)) for m in _FLAG.finditer(help_text))


def read_help(serve_argv: Sequence[str], timeout_s: float = 300.0) -> str | None:
    """The installed vLLM's flag list, or None when it cannot be run (not installed, or it crashed).

    `--help=all` first: since vLLM 0.10 a bare `--help` lists only the flag groups.
    """
    for variant in ("--help=all", "--help"):
        try:
            done = subprocess.run([*serve_argv, variant], capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = done.stdout + done.stderr
        if done.returncode == 0 and "--port" in text:
            return text
    return None


def filter_flags(args: Sequence[str], known: frozenset[str]) -> tuple[list[str], list[str]]:
    """(`args` without the flags `known` lacks, those dropped flags). A dropped flag takes its values with it:
    the tokens up to the next `--flag`."""
    kept: list[str] = []
    dropped: list[str] = []
    skipping = False
    for token in args:
        if token.startswith("--"):
            name = _normalise(token.split("=", 1)[0])
            skipping = name not in known
            if skipping:
                dropped.append(name)
                continue
        elif skipping:
            continue
        kept.append(token)
    return kept, dropped


def _normalise(flag: str) -> str:
    return "--" + flag[2:].replace("_", "-")


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """One server process to start: its command, extra environment, and where it will listen.

    `key_env` names the environment variable the launcher fills with the API key (None: the command carries
    its own key, as the test servers do).
    """

    name: str
    argv: list[str]
    env: dict[str, str]
    host: str
    port: int
    key_env: str | None = KEY_ENV

    @property
    def root_url(self) -> str:
        """Where `/health` lives (vLLM serves it outside `/v1`)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL clients use."""
        return f"{self.root_url}/v1"

    def render(self) -> str:
        """The exact command as a shell line (one flag per line), the key shown as `$IDFLOW_VLLM_API_KEY`."""
        env = [f"{k}={shlex.quote(v)}" for k, v in self.env.items()]
        if self.key_env:
            env.append(f"{self.key_env}={KEY_PLACEHOLDER}")
        head = _head_length(self.argv)
        lines = [" ".join([*env, *map(shlex.quote, self.argv[:head])])]
        line: list[str] = []
        for token in self.argv[head:]:
            if token.startswith("--") and line:
                lines.append(" ".join(line))
                line = []
            line.append(shlex.quote(token))
        if line:
            lines.append(" ".join(line))
        return " \\\n  ".join(lines)


def _head_length(argv: Sequence[str]) -> int:
    """Tokens before the first flag: the program, `serve` and the model."""
    return next((i for i, t in enumerate(argv) if t.startswith("--")), len(argv))


@dataclass(slots=True)
class CommandPlan:
    """The servers `up` would start, and what was learnt about the installed vLLM on the way."""

    specs: list[ServerSpec]
    served_model_name: str
    dropped: list[str] = field(default_factory=list)  # flags the installed vLLM does not know
    checked: bool = False  # False: `vllm serve --help` could not be run, flags were not checked


def pipeline_flags(*, served_model_name: str, host: str, port: int, prepare: PrepareSettings,
                   prompt_budget: int, max_tokens: int) -> list[str]:
    """The flags that follow from the pipeline config (same for every GPU but the port)."""
    return [
        "--served-model-name", served_model_name,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len(prepare, prompt_budget=prompt_budget, max_tokens=max_tokens)),
        "--limit-mm-per-prompt", json.dumps({"image": 1, "video": 0}),
        "--mm-processor-kwargs", json.dumps({"max_pixels": prepare.max_pixels}),
        "--mm-processor-cache-gb", "0",
        "--generation-config", "vllm",
        "--default-chat-template-kwargs", json.dumps({"enable_thinking": False}),
    ]


def request_logging_off(known: frozenset[str] | None) -> list[str]:
    """Flags that keep prompts (personal data) out of the server log. Request logging is off by default since
    vLLM 0.10.1 (`--enable-log-requests` opts in); only older releases need `--disable-log-requests`."""
    if known and "--disable-log-requests" in known and "--enable-log-requests" not in known:
        return ["--disable-log-requests"]
    return []


def plan(model: str, gpus: Sequence[str], settings: VllmSettings, prepare: PrepareSettings, *, max_tokens: int,
         served_model_name: str | None = None, port_base: int | None = None,
         help_text: str | None = None) -> CommandPlan:
    """One `vllm serve` per GPU (`CUDA_VISIBLE_DEVICES`), ports counting up from `port_base`.

    `help_text` is the installed vLLM's `serve --help=all` output (None: unknown, flags are kept unchecked).
    """
    known = known_flags(help_text) if help_text else None
    name = served_model_name or model.rstrip("/").rsplit("/", 1)[-1]
    base = settings.port_base if port_base is None else port_base
    result = CommandPlan(specs=[], served_model_name=name, checked=known is not None)
    for i, gpu in enumerate(gpus):
        port = base + i
        args = [*pipeline_flags(served_model_name=name, host=settings.host, port=port, prepare=prepare,
                                prompt_budget=settings.prompt_budget_tokens, max_tokens=max_tokens),
                *request_logging_off(known), *shlex.split(settings.extra_args)]
        if known is not None:
            args, dropped = filter_flags(args, known)
            result.dropped = dropped  # the same for every GPU
        result.specs.append(ServerSpec(name=f"gpu{gpu}", argv=[*settings.serve_argv, model, *args],
                                       env={"CUDA_VISIBLE_DEVICES": str(gpu)}, host=settings.host, port=port))
    return result
