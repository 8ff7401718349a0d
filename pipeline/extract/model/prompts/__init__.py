"""Versioned instruction templates for VLM backends.

Why files and a version: the prompt changes results, so its version belongs in the run fingerprint and in
the results; editing a template in place would silently mix answers from two prompts. Make a new `extract_vN.*`
and bump `PROMPT_VERSION` instead.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from typing import Literal

PROMPT_VERSION = "extract_v3"
REPAIR_VERSION = "repair_v1"
Lang = Literal["en", "zh"]

_DIR = files(__name__)  # importlib.resources: the templates ship inside the wheel as package data


@lru_cache(maxsize=None)
def load_prompt(lang: Lang = "en", version: str = PROMPT_VERSION) -> str:
    """The instruction text, e.g. `extract_v3.en.txt`."""
    return _DIR.joinpath(f"{version}.{lang}.txt").read_text(encoding="utf-8").strip()


def repair_prompt(errors: list[str], lang: Lang = "en") -> str:
    """The follow-up asking the model to fix its answer, quoting each problem on its own line."""
    quoted = "\n".join(f"- {e}" for e in errors)
    return load_prompt(lang, REPAIR_VERSION).replace("{errors}", quoted)
