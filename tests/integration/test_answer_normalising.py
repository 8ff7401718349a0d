"""A model's answer is read as a person would read it before it is checked: the PRC check character in lower case,
full-width digits, and spaces or hyphens between a number's groups no longer send a correct answer to the failure
queue; a value that is wrong after that is still refuted."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from pipeline.datamodel import Extraction, Failure, Reason, Record
from pipeline.extract.model.answer_parsing import normalised, parse_answer
from pipeline.extract.model.openai_compat import OpenAICompatBackend
from pipeline.validate import validate
from tests.integration.test_openai_backend import KEY, make_page, settings_for
from tests.support.chat_server import VALID_ANSWER, ChatServer, ServerConfig

PRC = "11010519491231002X"  # MOD 11-2 check character X


@pytest.mark.parametrize(("written", "read"), [
    ("11010519491231002x", PRC),
    ("１１０１０５１９４９１２３１００２Ｘ", PRC),  # full-width
    ("110105 19491231 002X", PRC),
    ("110105-19491231-002x", PRC),
    ("E 1234\u20115678", "E12345678"),  # a non-breaking hyphen
])
def test_document_numbers_lose_what_a_transcription_adds(written: str, read: str) -> None:
    assert parse_answer(json.dumps({**VALID_ANSWER, "id_number": written}))["id_number"] == read


def test_other_values_are_only_tidied() -> None:
    answer = normalised({"name": "  ＺＨＡＮＧ   SAN ", "expiry_date": "２０３１-０５-０１", "id_number": None,
                         "doc_type": "passport", "pages": 2})
    assert answer == {"name": "ZHANG SAN", "expiry_date": "2031-05-01", "id_number": None, "doc_type": "passport",
                      "pages": 2}


def _one(answer: dict, *, with_requests: bool = False) -> Any:
    """The backend's outcome for one page the server answers with `answer` (and the texts it was sent)."""
    async def go() -> Any:
        with ChatServer(ServerConfig(api_key=KEY, default_answer=answer)) as server:
            backend = OpenAICompatBackend(settings_for(server), concurrency=1)
            try:
                (outcome,) = await backend.extract([make_page(1)])
            finally:
                await backend.aclose()
            return (outcome, [r.text for r in server.requests]) if with_requests else outcome

    return asyncio.run(go())


def test_a_lower_case_check_character_is_stored_as_a_result() -> None:
    answer = {**VALID_ANSWER, "doc_type": "cn_id", "name": "张三", "id_number": "110105-19491231-002x",
              "expiry_date": "2031-05-01"}
    outcome = _one(answer)
    assert isinstance(outcome, Extraction), outcome
    assert outcome.fields["id_number"] == PRC
    assert json.loads(outcome.raw_response or "{}")["id_number"] == "110105-19491231-002x"  # the answer as sent


def test_a_wrong_number_is_still_refuted_after_tidying() -> None:
    """Y is no check character: the model is asked to repair it, and a number still refuted is unreadable in the
    record while the name and expiry stand; with nothing else read, the page is a checksum failure."""
    wrong = {**VALID_ANSWER, "doc_type": "cn_id", "id_number": "11010519491231002y"}
    outcome, requests = _one(wrong, with_requests=True)
    assert isinstance(outcome, Extraction) and len(requests) == 2 and "cn_id.checksum" in requests[1]
    record = validate(outcome, make_page(1))
    assert isinstance(record, Record) and record.extraction.fields["id_number"] is None
    assert record.extraction.fields["name"] == "ZHANG SAN" and "cn_id.checksum" in record.extraction.check_failures
    alone = _one({**wrong, "name": None, "expiry_date": None})
    failure = alone if isinstance(alone, Failure) else validate(alone, make_page(1))
    assert isinstance(failure, Failure) and failure.reason == Reason.CHECKSUM_FAILED
