"""Turn a model's text answer into the JSON object it contains, or say precisely why there is none.

Why tolerant: even with `response_format` some endpoints (or the instruction-only fallback) wrap the object
in a Markdown fence or add a sentence around it. Why strict about the rest: a list, a number or broken JSON is
never silently accepted, because the repair prompt and the failure queue need the exact reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pipeline.datamodel import Reason

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# Qwen3-family models in thinking mode put their reasoning (which may contain braces) before the answer.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class AnswerError(ValueError):
    """The answer holds no usable JSON object; `reason` is `no_json` or `invalid_json`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_answer(text: str | None) -> dict[str, Any]:
    """The JSON object in `text`: bare, inside a code fence, or with prose around it."""
    body = _THINK.sub("", text or "").strip()
    if not body:
        raise AnswerError(Reason.NO_JSON, "empty answer")
    fence = _FENCE.search(body)
    if fence:
        return _as_object(fence.group(1).strip())
    if body.startswith("["):
        return _as_object(body)  # a bare array is an answer of the wrong shape, not prose
    return _first_object(body)


def _as_object(candidate: str) -> dict[str, Any]:
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise AnswerError(Reason.INVALID_JSON, _describe(exc)) from None
    if not isinstance(value, dict):
        raise AnswerError(Reason.INVALID_JSON, f"expected a JSON object, got {type(value).__name__}")
    return value


def _first_object(body: str) -> dict[str, Any]:
    """The first decodable object starting at any `{`, ignoring text before and after it."""
    decoder = json.JSONDecoder()
    first_error: json.JSONDecodeError | None = None
    for match in re.finditer(r"\{", body):
        try:
            value, _ = decoder.raw_decode(body, match.start())
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict):
            return value
    if first_error is None:
        raise AnswerError(Reason.NO_JSON, "no JSON object in the answer")
    raise AnswerError(Reason.INVALID_JSON, _describe(first_error))


def _describe(exc: json.JSONDecodeError) -> str:
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
