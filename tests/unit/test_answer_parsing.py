from __future__ import annotations

import pytest

from pipeline.datamodel import Reason
from pipeline.extract.model.answer_parsing import AnswerError, parse_answer

OBJ = {"name": "ZHANG SAN", "id_number": None}
JSON = '{"name": "ZHANG SAN", "id_number": null}'


@pytest.mark.parametrize("text", [
    JSON,
    f"  \n{JSON}\n",
    f"```json\n{JSON}\n```",
    f"```\n{JSON}\n```",
    f"Here is the result:\n```json\n{JSON}\n```\nDone.",
    f"Here is the result: {JSON} Hope this helps.",
    f"{JSON}\n(fields I could not read are null)",
    f"<think>the card shows {{name}} ...</think>\n{JSON}",
    f"note {{not json}} then {JSON}",
    f"the card shows {{name}} ...</think>\n{JSON}",  # the chat template opened the reasoning in the prompt
    f"{JSON}\nAgain: {JSON}",  # the same object twice is one answer
])
def test_accepts_object_bare_fenced_or_embedded(text: str) -> None:
    assert parse_answer(text) == OBJ


def test_nested_objects_kept_whole() -> None:
    assert parse_answer('Result: {"a": {"b": [1, {"c": 2}]}} end') == {"a": {"b": [1, {"c": 2}]}}


@pytest.mark.parametrize("text", ["", "   ", None, "I cannot read this document.", "name: ZHANG SAN",
                                  # cut off at the token limit while thinking: its draft is not the answer
                                  '<think>A first guess: {"name": "DRAFT GUESS"} but the check digit',
                                  '<think>reasoning</think><think>more {"name": "DRAFT GUESS"}'])
def test_no_json(text: str | None) -> None:
    with pytest.raises(AnswerError) as info:
        parse_answer(text)
    assert info.value.reason == Reason.NO_JSON


@pytest.mark.parametrize("text", [
    '{"name": "ZHANG SAN", "id_number": }',
    '{"name": "ZHANG SAN"',
    "```json\n{'name': 'ZHANG SAN'}\n```",
    '["ZHANG SAN", null]',
    "```json\n[1, 2]\n```",
    "The answer is {name: ZHANG SAN}.",
    # two different objects: which is the answer is unknown (an example, then the document)
    f'For example an answer looks like {{"name": "EXAMPLE NAME"}}. The actual document: {JSON}',
    f'```json\n{{"name": "EXAMPLE NAME"}}\n```\nThe document:\n```json\n{JSON}\n```',
])
def test_invalid_json(text: str) -> None:
    with pytest.raises(AnswerError) as info:
        parse_answer(text)
    assert info.value.reason == Reason.INVALID_JSON
    assert info.value.detail
