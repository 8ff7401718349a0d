"""A VLM answer's own evidence, checked by idflow, over a real chat-completions server on loopback: its
machine-readable zone's check digits prove or refute its number and dates, a garbled zone never fails a record
that would pass without it, and token log-probabilities are used when given and dropped when refused."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage, Record
from pipeline.extract.model.openai_compat import OpenAICompatBackend, encode_jpeg
from pipeline.formats.mrz import check_ok
from pipeline.settings import OpenAISettings
from pipeline.trust import table as calibration
from pipeline.trust.table import Trust
from pipeline.validate import validate
from synth.identities import MRZPerson
from tests.support.chat_server import ChatCall, ChatServer, Reply, ServerConfig, image_sha256

KEY = "sk-test-evidence-0123456789"
PERSON = MRZPerson(surname="ERIKSSON", given_names="ANNA MARIA", sex="F", birth=dt.date(1974, 8, 12),
                   nationality="UTO", issuing_state="UTO", doc_number="L898902C3", issued=dt.date(2024, 4, 16),
                   expiry=dt.date(2034, 4, 15))
ZONE = list(PERSON.td3())
RIGHT: dict[str, Any] = {"doc_type": "passport", "name": "ERIKSSON ANNA MARIA", "id_number": "L898902C3",
                         "expiry_date": "2034-04-15", "orientation": "landscape", "mrz": ZONE,
                         "printed": {"name": "ERIKSSON ANNA MARIA", "id_number": "L898902C3"}}
# Mistakes a model makes reading the visual zone, on the number or the expiry date (the look-alike pairs and the
# swapped day and month of issue 29, and a neighbouring field's value): (the holder's number, the answer's).
NUMBER_MISTAKES = {"O_for_0": ("L898902C3", "L8989O2C3"), "I_for_1": ("L198902C3", "LI98902C3"),
                   "S_for_5": ("X5512345", "XS512345"), "B_for_8": ("L898902C3", "LB98902C3")}
EXPIRY_MISTAKES = {"day_month_swapped": "2034-05-04", "neighbour_birth_date": "1974-08-12",
                   "neighbour_issue_date": "2024-04-16"}


def make_page(i: int) -> PreparedImage:
    rng = np.random.default_rng(1000 + i)
    pixels = rng.integers(0, 255, size=(192, 320, 3), dtype=np.uint8)
    ref = DocumentRef(Path(f"/in/p{i}.jpg"), f"p{i}.jpg", f"{i:064x}")
    return PreparedImage(ref=ref, pixels=pixels, original_size=(320, 192), sent_size=(320, 192),
                         rotation_applied=0, skew_corrected=0.0, orientation="landscape", visual_tokens=60)


def sha(page: PreparedImage) -> str:
    return image_sha256(encode_jpeg(page.pixels))


def settings_for(server: ChatServer, **overrides: Any) -> OpenAISettings:
    values: dict[str, Any] = dict(base_url=server.base_url, api_key=KEY, model=server.config.model, timeout_s=5.0,
                                  max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, breaker_threshold=50)
    return OpenAISettings(**{**values, **overrides})


def extract(server: ChatServer, pages: Sequence[PreparedImage], tmp_path: Path, *, raw: bool = False,
            concurrency: int = 1, **overrides: Any) -> tuple[list[Extraction | Failure], OpenAICompatBackend]:
    async def go() -> tuple[list[Extraction | Failure], OpenAICompatBackend]:
        backend = OpenAICompatBackend(settings_for(server, **overrides), concurrency=concurrency)
        try:
            return await backend.extract(pages), backend
        finally:
            await backend.aclose()
    outcomes, backend = asyncio.run(go())
    trust = Trust(tmp_path / "tables", raw=raw)  # as the validate stage scores them: no table for this model
    return [trust(o) if isinstance(o, Extraction) else o for o in outcomes], backend


def answered(answers: dict[str, dict[str, Any]], **config: Any) -> ChatServer:
    return ChatServer(ServerConfig(api_key=KEY, answers=answers, **config))


def one(answer: dict[str, Any], tmp_path: Path, **kw: Any) -> tuple[Extraction | Failure, ChatServer]:
    page = make_page(0)
    with answered({sha(page): answer}) as server:
        (outcome,), _ = extract(server, [page], tmp_path, **kw)
    return outcome, server


def test_a_zone_that_proves_number_and_dates_gives_mrz_passed_classes(tmp_path: Path) -> None:
    outcome, server = one(RIGHT, tmp_path)
    assert isinstance(outcome, Extraction)
    assert {"mrz.number", "mrz.expiry", "cross.name_mrz_vs_viz"} <= set(outcome.checks)
    assert outcome.check_failures == []
    assert outcome.evidence == {"name": "name/mrz.name_vs_printed_passed/nolp",
                                "id_number": "id_number/mrz.number_passed/nolp",
                                "expiry_date": "expiry_date/mrz.expiry_passed/nolp"}
    assert "mrz" not in outcome.fields and "printed" not in outcome.fields  # evidence, not record fields
    # no table was fitted for this backend + model + prompt: each field its own zone proves gets the floor the
    # embedded table gives the same evidence (the class without /nolp, as a sure reading), never a made-up number
    shipped = calibration.shipped()
    assert outcome.calibration == "floor:" + shipped.table_id
    for name, cls in outcome.evidence.items():
        assert outcome.embedded[name] == (cls.removesuffix("/nolp"), 1.0)
        assert outcome.field_states[name].confidence == shipped.confidence(cls.removesuffix("/nolp"), 1.0)
        assert outcome.field_states[name].confidence >= 0.95
    assert '"mrz"' in server.requests[0].text  # the extract_v3 prompt asks for the zone
    assert isinstance(validate(outcome, make_page(0)), Record)


def _with_number(number: str) -> dict[str, Any]:
    return {**RIGHT, "id_number": number, "printed": {**RIGHT["printed"], "id_number": number}}


@pytest.mark.parametrize("kind", sorted(NUMBER_MISTAKES))
def test_every_look_alike_in_the_number_is_caught_by_the_zone_check_digit(kind: str, tmp_path: Path) -> None:
    """The field (and its printed copy: one misreading) holds a look-alike; the zone, a separate reading, is
    right: its check digit passes for its own number and not for the answer's, so the field disagrees."""
    number, wrong = NUMBER_MISTAKES[kind]
    person = dataclasses.replace(PERSON, doc_number=number)
    zone = list(person.td3())
    digit = zone[1][9]
    assert check_ok(person.doc_number.ljust(9, "<"), digit) and not check_ok(wrong.ljust(9, "<"), digit)
    outcome, _ = one({**_with_number(wrong), "mrz": zone}, tmp_path)
    assert isinstance(outcome, Extraction)
    assert "cross.number_answer_vs_mrz" in outcome.check_failures and "mrz.number" not in outcome.checks
    assert outcome.evidence["id_number"] == "id_number/disagrees"


@pytest.mark.parametrize("kind", sorted(EXPIRY_MISTAKES))
def test_every_expiry_mistake_is_caught_by_the_zone_check_digit(kind: str, tmp_path: Path) -> None:
    wrong = EXPIRY_MISTAKES[kind]
    if kind == "day_month_swapped":  # a swap that is still a date: the day is 12 or less
        person = dataclasses.replace(PERSON, expiry=dt.date(2034, 4, 5))
        zone, right = list(person.td3()), "2034-04-05"
    else:
        zone, right = ZONE, RIGHT["expiry_date"]
    digit = zone[1][27]
    assert check_ok(dt.date.fromisoformat(right).strftime("%y%m%d"), digit)
    assert not check_ok(dt.date.fromisoformat(wrong).strftime("%y%m%d"), digit)
    outcome, _ = one({**RIGHT, "mrz": zone, "expiry_date": wrong}, tmp_path)
    assert right != wrong
    assert isinstance(outcome, Extraction)
    assert "cross.expiry_answer_vs_mrz" in outcome.check_failures and "mrz.expiry" not in outcome.checks
    assert outcome.evidence["expiry_date"] == "expiry_date/disagrees"


def test_a_misreading_made_in_both_copies_is_refuted_by_the_check_digit(tmp_path: Path) -> None:
    """The model read the same wrong digit in the field and in the zone (one no look-alike repair can undo): the
    zone's own check digit refutes them; the model is asked once to repair, and a number still refuted is
    unreadable, as on the OCR path."""
    person = dataclasses.replace(PERSON, doc_number="X7437437")
    zone = list(person.td3())
    wrong_zone = [zone[0], zone[1].replace("X7437437", "X7437434")]
    outcome, server = one({**_with_number("X7437434"), "mrz": wrong_zone}, tmp_path)
    assert isinstance(outcome, Extraction) and "mrz.number" in outcome.check_failures
    assert len(server.requests) == 2 and "check digit" in server.requests[1].text  # the repair turn
    stored = validate(outcome, make_page(0))  # as on the OCR path: the number unreadable, the rest stands
    assert isinstance(stored, Record) and stored.extraction.fields["id_number"] is None
    assert stored.extraction.fields["name"] == outcome.fields["name"]
    assert "mrz.number" in stored.extraction.check_failures


def test_a_look_alike_in_both_copies_is_caught_by_the_check_digit(tmp_path: Path) -> None:
    """The same look-alike in the field and the zone: the zone's digit passes only for the zone read back with a
    digit, which is not the answer's number: unconfirmed (as on the OCR path), never proven."""
    wrong_zone = [ZONE[0], ZONE[1].replace("L898902C3", "L8989O2C3")]
    outcome, _ = one({**_with_number("L8989O2C3"), "mrz": wrong_zone}, tmp_path)
    assert isinstance(outcome, Extraction) and "mrz.number" not in outcome.checks
    assert outcome.evidence["id_number"] == "id_number/mrz.number_unconfirmed/nolp"


@pytest.mark.parametrize("position", [7, 20, 37, 44 + 2, 44 + 15, 44 + 30])
def test_a_garbled_zone_never_fails_a_record_that_would_pass_without_it(position: int, tmp_path: Path) -> None:
    """One character of the zone changed (a wrong MRZ line): no evidence either way, never a failure."""
    text = "".join(ZONE)
    changed = text[:position] + ("K" if text[position] == "<" else "<" if text[position].isalpha() else
                                 str((int(text[position]) + 3) % 10) if text[position].isdigit() else "X") \
        + text[position + 1:]
    zone = [changed[:44], changed[44:]]
    outcome, _ = one({**RIGHT, "mrz": zone}, tmp_path)
    assert isinstance(outcome, Extraction)
    record = validate(outcome, make_page(0))
    assert isinstance(record, Record), record
    assert not {"cross.number_answer_vs_mrz", "cross.expiry_answer_vs_mrz"} & set(outcome.check_failures)
    if 44 <= position < 54:  # in the number: the answer's number, passing the zone's digit, is still proven
        assert "mrz.number" in outcome.checks


def test_an_answer_without_a_zone_is_judged_on_its_fields(tmp_path: Path) -> None:
    outcome, _ = one({**RIGHT, "mrz": None, "printed": None}, tmp_path)
    assert isinstance(outcome, Extraction)
    assert not any(c.startswith("mrz.") for c in outcome.checks + outcome.check_failures)
    assert outcome.evidence["id_number"] == "id_number/printed/nolp"


def test_a_zone_name_closed_by_fillers_contradicts_a_longer_answer_name(tmp_path: Path) -> None:
    outcome, _ = one({**RIGHT, "name": "ERIKSSON ANNA MARIA LOUISE",
                      "printed": {**RIGHT["printed"], "name": "ERIKSSON ANNA MARIA LOUISE"}}, tmp_path)
    assert isinstance(outcome, Extraction)
    assert "cross.name_mrz_vs_viz" in outcome.check_failures
    assert outcome.evidence["name"] == "name/disagrees"


# --------------------------------------------------------------------------------------- log-probabilities


def _tokens(text: str, low: str, low_logprob: float = math.log(0.3)) -> list[dict[str, Any]]:
    """The answer cut into 3-character tokens; those overlapping `low`'s first occurrence get `low_logprob`."""
    start = text.index(low)
    out = []
    for i in range(0, len(text), 3):
        token = text[i:i + 3]
        lp = low_logprob if i < start + len(low) and i + 3 > start else math.log(0.999)
        out.append({"token": token, "logprob": lp, "bytes": list(token.encode()), "top_logprobs": []})
    return out


def _logprob_responder(answer: dict[str, Any], low: str) -> Any:
    content = json.dumps(answer, ensure_ascii=False)

    def respond(call: ChatCall) -> Reply:
        tokens = _tokens(content, low) if call.body.get("logprobs") else None
        return Reply(answer, content, tokens)
    return respond


def test_logprobs_give_each_field_its_lowest_token_probability(tmp_path: Path) -> None:
    page = make_page(0)
    with ChatServer(ServerConfig(api_key=KEY, responder=_logprob_responder(RIGHT, "ANNA MARIA"))) as server:
        (outcome,), _ = extract(server, [page], tmp_path, raw=True)
    assert server.requests[0].logprobs
    assert isinstance(outcome, Extraction)
    assert outcome.field_states["name"].confidence == pytest.approx(0.3, abs=1e-6)
    assert outcome.field_states["id_number"].confidence == pytest.approx(0.999, abs=1e-6)
    assert outcome.evidence["name"] == "name/mrz.name_vs_printed_passed/lp"


def test_a_refused_logprobs_parameter_is_dropped_for_the_run(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    pages = [make_page(i) for i in range(4)]
    with ChatServer(ServerConfig(api_key=KEY, reject_logprobs=True, answers={sha(p): RIGHT for p in pages})) \
            as server, caplog.at_level(logging.WARNING):
        outcomes, backend = extract(server, pages, tmp_path, raw=True)
    assert all(isinstance(o, Extraction) for o in outcomes)
    assert not backend.logprobs_enabled
    assert [r.logprobs for r in server.requests] == [True, False, False, False, False]  # one refusal, then never
    assert sum("refused logprobs" in r.getMessage() for r in caplog.records) == 1
    # what was sent is counted: the page whose request was refused (whichever went first) was sent twice
    assert sorted(o.attempts for o in outcomes if isinstance(o, Extraction)) == [1, 1, 1, 2]
    assert all(o.evidence["name"].endswith("/nolp") for o in outcomes if isinstance(o, Extraction))
    assert all(o.field_states["name"].confidence == 1.0 for o in outcomes if isinstance(o, Extraction))


def test_logprobs_off_by_setting_are_never_sent(tmp_path: Path) -> None:
    page = make_page(0)
    with ChatServer(ServerConfig(api_key=KEY, responder=_logprob_responder(RIGHT, "ANNA"))) as server:
        (outcome,), _ = extract(server, [page], tmp_path, raw=True, logprobs=False)
    assert [r.logprobs for r in server.requests] == [False]
    assert isinstance(outcome, Extraction) and outcome.evidence["name"].endswith("/nolp")


def test_a_name_in_chinese_characters_is_not_compared_with_the_zone_s_latin_name(tmp_path: Path) -> None:
    outcome, _ = one({**RIGHT, "name": "埃里克松安娜", "printed": {**RIGHT["printed"], "name": "埃里克松安娜"}},
                     tmp_path)
    assert isinstance(outcome, Extraction)
    assert "cross.name_mrz_vs_viz" not in outcome.checks + outcome.check_failures
    assert outcome.evidence["name"] != "name/disagrees"
