"""Start-up watchdog for `vllm serve`: follow each server's log, report progress, explain a stall.

Why: the classic failure is a server that logs "Encoder cache will be initialized with a budget of 16384
tokens, and profiled with 1 image items of the maximum feature size" and then prints nothing for many minutes
while it builds and encodes a 4096x4096 dummy image, because `max_pixels` never reached the processor. That
line says how big vLLM believes the largest image is: it profiles K = budget // max_item_tokens items, so
budget / K bounds the tokens of one maximum image, which can be compared with the pipeline's own budget
(`max_pixels / patch^2`). Parsing is pure; a small thread follows a log file and calls `report`.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

ENCODER_LINE = re.compile(r"Encoder cache will be initialized with a budget of (?P<budget>\d+) tokens,?\s+and "
                          r"profiled with (?P<items>\d+) (?P<modality>\w+) items of the maximum feature size")
# Milestones of a vLLM start, in order; the first match names the stage a line belongs to.
_STAGES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Loading safetensors|Loading weights|Starting to load model"), "loading weights"),
    (re.compile(r"Model loading took"), "weights loaded"),
    (ENCODER_LINE, "profiling the vision encoder"),
    (re.compile(r"KV cache|Memory profiling takes"), "sizing the KV cache"),
    (re.compile(r"[Cc]apturing CUDA graph|torch\.compile|Compiling a graph"), "compiling / capturing CUDA graphs"),
    (re.compile(r"Starting vLLM API server|Uvicorn running on|Application startup complete"), "serving"),
)
_ERROR = re.compile(r"\b\w*(Error|Exception)\b: |out of memory|Traceback \(most recent call last\)")
# Tolerances when comparing the server's maximum image with the pipeline's: vLLM's largest-image search and
# the rounding of K allow a few percent either way; a server off by more did not get our max_pixels.
_TOO_BIG = 1.25
_TOO_SMALL = 0.8


@dataclass(frozen=True, slots=True)
class EncoderBudget:
    """The numbers of the encoder-cache line: budget B tokens, K items of the maximum size."""

    budget_tokens: int
    items: int
    modality: str

    @property
    def item_tokens_range(self) -> tuple[int, int]:
        """Bounds on the tokens of one maximum-size item: K = B // item, so B/(K+1) < item <= B/K."""
        return self.budget_tokens // (self.items + 1) + 1, self.budget_tokens // self.items


def parse_encoder_budget(line: str) -> EncoderBudget | None:
    match = ENCODER_LINE.search(line)
    if match is None or int(match["items"]) == 0:
        return None
    return EncoderBudget(int(match["budget"]), int(match["items"]), match["modality"])


def stage_of(line: str) -> str | None:
    return next((name for pattern, name in _STAGES if pattern.search(line)), None)


def is_error(line: str) -> bool:
    return bool(_ERROR.search(line))


@dataclass(frozen=True, slots=True)
class BudgetVerdict:
    """Whether the server's maximum image matches the pipeline's `max_pixels`, in one sentence."""

    kind: Literal["ok", "ignored", "below_pipeline"]
    message: str


def check_budget(budget: EncoderBudget, max_pixels: int, patch: int) -> BudgetVerdict:
    """Compare the largest image the server profiles with the largest page the pipeline sends."""
    expected = max_pixels // patch ** 2
    low, high = budget.item_tokens_range
    server = f"{low:,}-{high:,}" if low < high else f"{high:,}"
    seen = (f"budget {budget.budget_tokens:,} tokens / {budget.items} {budget.modality} items: the server's "
            f"largest {budget.modality} is about {server} visual tokens; the pipeline sends at most {expected:,} "
            f"(max_pixels {max_pixels:,} / {patch}x{patch})")
    if low > expected * _TOO_BIG:
        return BudgetVerdict("ignored", f"{seen}. max_pixels {max_pixels:,} did NOT take effect: vLLM profiles "
                                        f"images of up to about {high * patch * patch:,} pixels")
    if high < expected * _TOO_SMALL:
        return BudgetVerdict("below_pipeline", f"{seen}. The server's limit is below the pipeline's: pages will be "
                                    "shrunk again or refused; make IDFLOW_MAX_PIXELS and the server's "
                                    "max_pixels equal")
    return BudgetVerdict("ok", f"{seen}. max_pixels took effect")


def stall_diagnosis(budget: EncoderBudget, max_pixels: int, patch: int, silent_s: float) -> str:
    """What a server silent after the encoder-cache line is doing, and what to change."""
    verdict = check_budget(budget, max_pixels, patch)
    doing = (f"no log output for {silent_s:.0f} s after the encoder-cache line: vLLM is profiling the vision "
             f"encoder with {budget.items} dummy {budget.modality}(s) of the maximum size (CPU resize in the HF "
             f"processor, then the ViT forward on the GPU). {verdict.message}.")
    if verdict.kind == "ignored":
        side = int(max_pixels ** 0.5)
        return (f"{doing} Change: make sure --mm-processor-kwargs '{{\"max_pixels\": {max_pixels}}}' reaches the "
                "server (some versions ignore it: try '{\"size\": {\"longest_edge\": "
                f"{max_pixels}, \"shortest_edge\": 65536}}}}'), or bound only the dummy with --limit-mm-per-prompt "
                f"'{{\"image\": {{\"count\": 1, \"width\": {side}, \"height\": {side}}}, \"video\": 0}}'; drop "
                "--mm-encoder-tp-mode data and --mm-processor-cache-type shm (no use on one GPU).")
    return (f"{doing} The dummy is already small, so the encoder itself is slow. Change: on pre-Ampere GPUs "
            "(V100, T4) add --mm-encoder-attn-backend TORCH_SDPA; avoid PyTorch 2.9.x (Conv3d regression); with "
            "several servers on one host set OMP_NUM_THREADS=1; `py-spy dump --pid <EngineCore pid>` shows "
            "whether it sits in processor.apply (CPU) or in the ViT (GPU).")


class StartupWatch:
    """The state of one server's start: stage, encoder budget, time of the last output.

    `feed` takes log lines and returns messages worth reporting; `check` returns a diagnosis once per
    silence of `stall_after_s`. The clock is injectable so the logic is testable without waiting.
    """

    def __init__(self, name: str, *, max_pixels: int, patch: int, stall_after_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.max_pixels = max_pixels
        self.patch = patch
        self.stall_after_s = stall_after_s
        self.clock = clock
        self.stage = "starting"
        self.budget: EncoderBudget | None = None
        self.last_output = clock()
        self._silence_reported = False

    def feed(self, line: str) -> list[str]:
        self.last_output = self.clock()
        self._silence_reported = False
        messages: list[str] = []
        stage = stage_of(line)
        if stage is not None and stage != self.stage:
            self.stage = stage
            messages.append(f"{self.name}: {stage}")
        budget = parse_encoder_budget(line)
        if budget is not None:
            self.budget = budget
            messages.append(f"{self.name}: {check_budget(budget, self.max_pixels, self.patch).message}")
        if is_error(line):
            messages.append(f"{self.name}: error in the log: {line.strip()[:300]}")
        return messages

    def check(self) -> str | None:
        silent = self.clock() - self.last_output
        if self._silence_reported or silent < self.stall_after_s or self.stage == "serving":
            return None  # a serving server is quiet when idle (request logging is off)
        self._silence_reported = True
        if self.budget is not None and self.stage == "profiling the vision encoder":
            return f"{self.name}: {stall_diagnosis(self.budget, self.max_pixels, self.patch, silent)}"
        return f"{self.name}: no log output for {silent:.0f} s (stage: {self.stage})"


class LogWatchdog:
    """Follows a log file on a daemon thread, feeding a `StartupWatch` and calling `report` with what it says.

    Reads raw chunks, not lines: tqdm progress bars rewrite one line with `\\r`, and a growing bar is progress.
    """

    def __init__(self, path: Path, watch: StartupWatch, report: Callable[[str], None], *,
                 poll_s: float = 0.2) -> None:
        self.path = path
        self.watch = watch
        self.report = report
        self.poll_s = poll_s
        self.diagnoses: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watchdog-{watch.name}", daemon=True)

    def start(self) -> LogWatchdog:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self) -> LogWatchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self.path.exists():
            if self._stop.wait(self.poll_s):
                return
        pending = ""
        with self.path.open("r", encoding="utf-8", errors="replace") as log:
            while True:
                chunk = log.read(65536)
                if not chunk:
                    if self._stop.is_set():  # stop only once caught up: what was logged gets reported
                        return
                    self._check()
                    self._stop.wait(self.poll_s)
                    continue
                *lines, pending = re.split(r"[\r\n]", pending + chunk)
                for line in lines or [""]:  # a partial line is output too
                    for message in self.watch.feed(line):
                        self.report(message)

    def _check(self) -> None:
        diagnosis = self.watch.check()
        if diagnosis is not None:
            self.diagnoses.append(diagnosis)
            self.report(diagnosis)
