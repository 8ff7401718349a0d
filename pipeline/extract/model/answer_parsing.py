"""Turn a model's text answer into the JSON object it contains, or say precisely why there is none.

Why tolerant: even with `response_format` some endpoints (or the instruction-only fallback) wrap the object
in a Markdown fence or add a sentence around it. Why strict about the rest: a list, a number or broken JSON is
never silently accepted, because the repair prompt and the failure queue need the exact reason.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

from pipeline.datamodel import Reason

_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
# Qwen3-family models in thinking mode put their reasoning (which may contain braces, even a draft answer) before
# the answer. Their chat template may open the block in the prompt, so the answer then holds only its close.
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)


class AnswerError(ValueError):
    """The answer holds no usable JSON object; `reason` is `no_json` or `invalid_json`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def parse_answer(text: str | None) -> dict[str, Any]:
    """The one JSON object in `text`: bare, inside a code fence, or with prose around it, its values written as
    a person would read them (`normalised`). Two different objects ("for example {...}; the document: {...}")
    are not guessed between: which one is the answer is unknown."""
    body = _answer_part(text or "")
    fences = [m.group(1).strip() for m in _FENCE.finditer(body)]
    if fences:
        return normalised(_one([_as_object(f) for f in fences]))
    if body.startswith("["):
        return _as_object(body)  # a bare array is an answer of the wrong shape, not prose
    return normalised(_one(_top_level_objects(body)))


_NUMBER_SEPARATORS = re.compile(r"[\s\-\u2010-\u2015\u2212]+")  # spaces and every kind of hyphen


def normalised(fields: dict[str, Any]) -> dict[str, Any]:
    """The answer's values as a person copying them from the page would write them, before any check: full-width
    characters as ASCII (NFKC), surrounding and repeated spaces dropped, and in the document number also the
    spaces and hyphens a transcription puts between groups, and lower-case letters raised (`...002x` is the
    PRC check character X). Nothing is guessed: a value that is still wrong after this fails its checks."""
    out = dict(fields)
    for key, value in fields.items():
        if not isinstance(value, str):
            continue
        text = " ".join(unicodedata.normalize("NFKC", value).split())
        if key == "id_number":
            text = _NUMBER_SEPARATORS.sub("", text).upper()
        out[key] = text
    return out


def _answer_part(text: str) -> str:
    """`text` without the model's reasoning; an error when the reasoning never ended (the answer was cut off at
    the token limit while thinking: a draft inside it is not the answer)."""
    body = _THINK.sub("", text)
    if "</think>" in body:  # the template opened the block: all before its close is reasoning
        body = body.rsplit("</think>", 1)[1]
    if "<think>" in body:
        body = body.split("<think>", 1)[0]
        if not body.strip():
            raise AnswerError(Reason.NO_JSON, "the reasoning was cut off before the answer (raise max_tokens)")
    body = body.strip()
    if not body:
        raise AnswerError(Reason.NO_JSON, "empty answer")
    return body


def _one(objects: list[dict[str, Any]]) -> dict[str, Any]:
    distinct = [o for i, o in enumerate(objects) if o not in objects[:i]]
    if len(distinct) > 1:
        raise AnswerError(Reason.INVALID_JSON, f"{len(distinct)} different JSON objects in the answer")
    return distinct[0]


def _as_object(candidate: str) -> dict[str, Any]:
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise AnswerError(Reason.INVALID_JSON, _describe(exc)) from None
    if not isinstance(value, dict):
        raise AnswerError(Reason.INVALID_JSON, f"expected a JSON object, got {type(value).__name__}")
    return value


def _top_level_objects(body: str) -> list[dict[str, Any]]:
    """Every decodable object starting at a `{` outside the objects before it, ignoring the text around them;
    at least one, else the reason there is none."""
    decoder = json.JSONDecoder()
    first_error: json.JSONDecodeError | None = None
    found: list[dict[str, Any]] = []
    end = 0
    for match in re.finditer(r"\{", body):
        if match.start() < end:
            continue  # inside an object already taken
        try:
            value, stop = decoder.raw_decode(body, match.start())
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
            continue
        if isinstance(value, dict):
            found.append(value)
            end = stop
    if found:
        return found
    if first_error is None:
        raise AnswerError(Reason.NO_JSON, "no JSON object in the answer")
    raise AnswerError(Reason.INVALID_JSON, _describe(first_error))


def _describe(exc: json.JSONDecodeError) -> str:
    return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
