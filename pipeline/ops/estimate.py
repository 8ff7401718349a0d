"""Predicted visual tokens and cost of a run before anything is sent (`idflow run --dry-run`).

Why it can be exact for the image part: every page is resized on our side to sides that are multiples of the
patch, so its visual tokens are `(w / patch) * (h / patch)` whatever the model. The text part (instruction,
chat template, answer) is an estimate, and printed as one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.datamodel import Failure, Skipped
from pipeline.extract.model.prompts import load_prompt
from pipeline.ingest.containers import ContainerError, page_size
from pipeline.ingest.discover import Discovery
from pipeline.prepare.resize import fit_to_budget, visual_tokens
from pipeline.settings import Settings

# Rough tokenizer-free figures: ~3 characters per token for the instruction (mixed English/JSON; Chinese is
# closer to 1.5), ~30 tokens of chat template and image markers, ~60 tokens for a typical JSON answer.
# The upper bound on the answer is max_tokens.
CHARS_PER_TOKEN = 3
TEMPLATE_TOKENS = 30
TYPICAL_COMPLETION_TOKENS = 60


@dataclass
class Estimate:
    pages: int = 0
    skipped: int = 0
    unreadable: int = 0
    visual_tokens: int = 0

    def prompt_tokens(self, settings: Settings) -> int:
        text = len(load_prompt(settings.openai.prompt_lang)) // CHARS_PER_TOKEN + TEMPLATE_TOKENS
        return self.visual_tokens + self.pages * text

    def cost(self, settings: Settings, completion_per_page: int) -> float:
        o = settings.openai
        return (self.prompt_tokens(settings) * o.price_prompt_per_mtok
                + self.pages * completion_per_page * o.price_completion_per_mtok) / 1e6


def estimate_folder(root: Path, settings: Settings) -> Estimate:
    """Walk the folder as a run would (same skips) and add up each page's predicted visual tokens."""
    est = Estimate()
    for item in Discovery(root).items():
        if isinstance(item, Skipped):
            est.skipped += 1
        elif isinstance(item, Failure):
            est.unreadable += 1
        else:
            try:
                width, height = page_size(item.path, item.page, settings.prepare)
            except ContainerError:
                est.unreadable += 1
                continue
            est.visual_tokens += visual_tokens(*fit_to_budget(width, height, settings.prepare),
                                               settings.prepare.patch)
            est.pages += 1
    return est
