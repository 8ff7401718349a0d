"""The mistake-making endpoint's pure parts (tests/support/mistake_server.py): the draw honours each rate, the
mistakes are what they say, the zone is valid when no mistake is drawn, the log-probabilities are lower on altered
characters. No images, no server: the truth is built from manifest entries."""

from __future__ import annotations

import datetime as dt
import json
import math
import random

import pytest

from pipeline.formats.cn_id import is_valid_number
from pipeline.formats.mrz import parse
from tests.support.mistake_server import (
    KINDS,
    PAIRS,
    LogprobModel,
    MistakeRates,
    PageTruth,
    applies,
    compose,
    draw_mistakes,
    page_truth,
    render_answer,
    token_logprobs,
)

TODAY = dt.date(2026, 1, 1)
PASSPORT = {"path": "e0001_passport_clean_png.png", "page": 0, "doc_type": "passport", "name": "VAN DER BERG JAN PIETER",
            "id_number": "IB4027735", "expiry_date": "2033-02-11", "orientation": "landscape"}
TD1 = {"path": "e0002_td1_skew.jpg", "page": 0, "doc_type": "id_card", "name": "SMITH ANNA",
       "id_number": "UT4815926", "expiry_date": "2031-04-05", "orientation": "landscape"}
TD2 = {**TD1, "path": "e0003_td2_blur.jpg", "name": "ZHANG WEI MING", "id_number": "E83710524"}
VISA = {**TD1, "path": "e0004_visa_noise.jpg", "doc_type": "visa", "name": "SILVA MARIA"}
CN_FRONT = {"path": "e0005_cn_front_clean_png.png", "page": 0, "doc_type": "cn_id", "name": "赵思佳",
            "id_number": "420106197802143024", "expiry_date": None, "orientation": "landscape"}
CN_BACK = {"path": "e0006_cn_back_photo.jpg", "page": 0, "doc_type": "cn_id", "name": None, "id_number": None,
           "expiry_date": "2032-10-09", "orientation": "landscape"}
ENTRIES = [PASSPORT, TD1, TD2, VISA, CN_FRONT, CN_BACK]


def truths() -> list[PageTruth]:
    return [page_truth(e) for e in ENTRIES]


def test_zones_are_valid_and_agree_with_the_fields() -> None:
    for truth in truths():
        if truth.doc_type == "cn_id":
            assert truth.mrz is None
            continue
        result = parse(truth.mrz, TODAY)
        assert result is not None and result.valid, (truth.path, truth.mrz)
        assert result.number == truth.id_number and result.expiry_date.isoformat() == truth.expiry_date
        assert result.name == truth.name and result.birth_date.isoformat() == truth.birth_date
    formats = {t.path: parse(t.mrz, TODAY).format for t in truths() if t.mrz}
    assert [len(page_truth(e).mrz[0]) for e in (PASSPORT, TD1, TD2, VISA)] == [44, 30, 36, 44], formats
    assert page_truth(PASSPORT).mrz[0].startswith("P<UTOVAN<DER<BERG<<JAN<PIETER<")


def test_no_mistake_at_rate_zero() -> None:
    for truth in truths():
        assert draw_mistakes(truth, MistakeRates.uniform(0.0), 1, truth.path) == []
        comp = compose(truth, [], 1, truth.path)
        assert comp.fields == truth.fields() and comp.mistakes == [] and comp.mrz == (list(truth.mrz or []) or None)
        assert comp.printed == {"name": truth.name, "id_number": truth.id_number}


@pytest.mark.parametrize("kind", KINDS)
def test_each_rate_is_honoured_within_a_binomial_tolerance(kind: str) -> None:
    """Every kind at its own rate (the others at another), 200 pages per entry: the share drawn among the
    applicable (kind, field) pairs is within 4 standard deviations of the rate."""
    rate = 0.12
    rates = MistakeRates(**{k: (rate if k == kind else 0.3) for k in KINDS})
    hits = trials = 0
    for truth in truths():
        fields = [f for k, f in PAIRS if k == kind]
        for i in range(200):
            key = f"{truth.path}:{i}"
            drawn = draw_mistakes(truth, rates, 7, key)
            for f in fields:
                value = None if f == "mrz" else truth.value(f)
                if applies(kind, f, truth, value):
                    trials += 1
                    hits += (kind, f) in drawn
    assert trials >= 300
    assert abs(hits - trials * rate) <= 4 * math.sqrt(trials * rate * (1 - rate)) + 1, (hits, trials)


def test_draws_are_deterministic_per_seed_and_nested_across_rates() -> None:
    truth = page_truth(PASSPORT)
    keys = [f"k{i}" for i in range(200)]
    low, high = MistakeRates.uniform(0.05), MistakeRates.uniform(0.3)
    assert [draw_mistakes(truth, high, 3, k) for k in keys] == [draw_mistakes(truth, high, 3, k) for k in keys]
    assert [draw_mistakes(truth, high, 3, k) for k in keys] != [draw_mistakes(truth, high, 4, k) for k in keys]
    for k in keys:
        assert set(draw_mistakes(truth, low, 3, k)) <= set(draw_mistakes(truth, high, 3, k))


def one(entry: dict, kind: str, field: str, seed: int = 5) -> tuple[PageTruth, object]:
    truth = page_truth(entry)
    comp = compose(truth, [(kind, field)], seed, "key")
    [mistake] = comp.mistakes
    assert (mistake.kind, mistake.field) == (kind, field)
    return truth, comp


def test_substitution_is_a_look_alike_in_the_field_and_its_printed_copy() -> None:
    for entry, field in ((PASSPORT, "name"), (PASSPORT, "id_number"), (CN_FRONT, "name"), (CN_FRONT, "id_number")):
        truth, comp = one(entry, "substitution", field)
        given, right = comp.fields[field], truth.value(field)
        assert len(given) == len(right) and sum(a != b for a, b in zip(given, right)) == 1
        assert comp.printed[field] == given and comp.mrz == (list(truth.mrz) if truth.mrz else None)
    _, comp = one(CN_FRONT, "substitution", "id_number")
    assert is_valid_number(CN_FRONT["id_number"]) and not is_valid_number(comp.fields["id_number"])  # MOD 11-2


def test_day_month_swap_neighbour_invented_truncation() -> None:
    truth, comp = one(TD1, "day_month_swap", "expiry_date")
    assert comp.fields["expiry_date"] == "2031-05-04"
    truth, comp = one(PASSPORT, "neighbour", "expiry_date")
    assert comp.fields["expiry_date"] == truth.birth_date
    truth, comp = one(PASSPORT, "neighbour", "id_number")
    assert comp.fields["id_number"] == truth.other_number and truth.other_number in truth.mrz[1]
    assert not applies("neighbour", "expiry_date", page_truth(CN_FRONT), None)
    for field in ("name", "id_number"):
        truth, comp = one(CN_BACK, "invented", field)
        assert comp.fields[field] and comp.printed[field] == comp.fields[field]
    _, comp = one(CN_FRONT, "invented", "expiry_date")
    assert dt.date.fromisoformat(comp.fields["expiry_date"])
    _, comp = one(PASSPORT, "truncation", "name")
    assert "VAN DER BERG JAN PIETER".startswith(comp.fields["name"]) and comp.fields["name"] != PASSPORT["name"]
    _, comp = one(CN_FRONT, "truncation", "name")
    assert comp.fields["name"] == "赵思"


def test_a_wrong_zone_line_changes_one_character_and_leaves_the_fields() -> None:
    caught = 0
    for seed in range(40):
        truth, comp = one(PASSPORT, "mrz_line", "mrz", seed)
        assert comp.fields == truth.fields()
        assert sum(a != b for line, right in zip(comp.mrz, truth.mrz) for a, b in zip(line, right)) == 1
        result = parse(comp.mrz, TODAY)
        caught += result is None or not result.valid or result.name != truth.name
    assert caught >= 30  # most changed characters break a check digit or the name; a filler read as K is a name


def test_answer_text_is_json_and_its_marks_are_the_altered_characters() -> None:
    truth = page_truth(PASSPORT)
    comp = compose(truth, [("substitution", "id_number"), ("mrz_line", "mrz")], 2, "key")
    text, marks = render_answer(comp, evidence=True)
    obj = json.loads(text)
    assert list(obj) == ["doc_type", "name", "id_number", "expiry_date", "orientation", "mrz", "printed"]
    assert obj["mrz"] == comp.mrz and obj["printed"] == comp.printed
    assert len(marks) == 3  # the field's, the printed copy's and the zone's character
    assert {text[i] for i in marks} <= set(comp.fields["id_number"]) | set("".join(comp.mrz))
    plain, plain_marks = render_answer(comp, evidence=False)
    assert list(json.loads(plain)) == ["doc_type", "name", "id_number", "expiry_date", "orientation"]
    assert len(plain_marks) == 1


def test_token_logprobs_cover_the_text_and_are_lower_on_altered_tokens() -> None:
    rng = random.Random(1)
    right, wrong = [], []
    for i in range(60):
        truth = page_truth(ENTRIES[i % len(ENTRIES)])
        drawn = draw_mistakes(truth, MistakeRates.uniform(0.3), 11, f"k{i}")
        text, marks = render_answer(compose(truth, drawn, 11, f"k{i}"), evidence=True)
        tokens = token_logprobs(text, marks, LogprobModel(), rng, top=3)
        assert "".join(t["token"] for t in tokens) == text
        assert all(1 <= len(t["token"]) <= 4 and t["logprob"] <= 0 and len(t["top_logprobs"]) == 3 for t in tokens)
        offset = 0
        for t in tokens:
            hit = any(j in marks for j in range(offset, offset + len(t["token"])))
            (wrong if hit else right).append(math.exp(t["logprob"]))
            offset += len(t["token"])
    assert len(wrong) > 40
    assert sum(wrong) / len(wrong) < sum(right) / len(right) - 0.3
    assert max(wrong) > 0.9 and min(right) < 0.6  # the distributions overlap: a mistake is not always low
