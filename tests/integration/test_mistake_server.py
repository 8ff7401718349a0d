"""The mistake-making endpoint (tests/support/mistake_server.py) over HTTP, with the openai SDK and with idflow's
own backend, on the committed sample set: it recognises the pages idflow sends, answers both prompt shapes, keeps
to its seed, records what it injected, and answers, ignores or refuses log-probabilities."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import math
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from pipeline.datamodel import DocumentRef, Extraction, PreparedImage
from pipeline.extract.model.openai_compat import OpenAICompatBackend, encode_jpeg, jpeg_data_url
from pipeline.extract.model.prompts import load_prompt
from pipeline.formats.mrz import parse
from pipeline.ingest.containers import page_count
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.settings import OpenAISettings, Settings
from tests.support.chat_server import ServerConfig
from tests.support.mistake_server import FIELDS, MistakeConfig, MistakeRates, MistakeServer, PageTruth, index_manifest
from tests.support.paths import REPO

MANIFEST = REPO / "data" / "sample_ground_truth.json"
SAMPLE = REPO / "data" / "sample"
V2 = load_prompt("en", "extract_v2")  # the prompt without the evidence keys
# What the evidence prompt adds to the question: the server keys on the `"mrz"` key being asked for.
V3 = load_prompt("en", "extract_v3")
TODAY = dt.date(2026, 1, 1)


@pytest.fixture(scope="module")
def settings() -> Settings:
    return Settings()


@pytest.fixture(scope="module")
def index(settings: Settings) -> tuple[dict[str, PageTruth], list[str]]:
    return index_manifest(MANIFEST, settings.prepare)


@pytest.fixture(scope="module")
def pages(settings: Settings) -> list[PreparedImage]:
    """The good pages of the sample set, prepared as a VLM run prepares them."""
    out = []
    for entry in json.loads(MANIFEST.read_text(encoding="utf-8")):
        if "expect_failure" in entry or entry.get("expect_skip"):
            continue
        path = SAMPLE / entry["path"]
        ref = DocumentRef(path, entry["path"], sha256_file(path), page=entry["page"], page_count=page_count(path))
        prepared = prepare_page(ref, settings.prepare, keep_full=False)
        assert isinstance(prepared, PreparedImage)
        out.append(prepared)
    return out


@pytest.fixture
def serve(settings: Settings, index: tuple[dict[str, PageTruth], list[str]]) -> Iterator[Any]:
    started: list[MistakeServer] = []

    def start(**config: Any) -> MistakeServer:
        server = MistakeServer(MANIFEST, settings, MistakeConfig(**config), index=index).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def client(server: MistakeServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key=server.config.api_key, max_retries=0, timeout=60)


def ask(server: MistakeServer, page: PreparedImage, prompt: str = V3, **extra: Any) -> Any:
    return client(server).chat.completions.create(
        model=server.config.model, temperature=0, **extra,
        messages=[{"role": "user", "content": [
            {"type": "text", "text": prompt},
            {"type": "image_url", "image_url": {"url": jpeg_data_url(encode_jpeg(page.pixels))}}]}])


def answer(response: Any) -> dict[str, Any]:
    return json.loads(response.choices[0].message.content)


def test_every_sample_page_is_recognised_and_answered_with_its_truth(serve: Any, pages: list[PreparedImage],
                                                                   index: tuple[dict, list]) -> None:
    server = serve()
    assert len(server.pages) == len(pages) == 12 and server.unprepared == []
    truths = {(t.path, t.page): t for t in server.pages.values()}
    zones = 0
    for page in pages:
        truth = truths[(page.ref.rel_path, page.ref.page)]
        v2, v3 = answer(ask(server, page, V2)), answer(ask(server, page, V3))
        assert v2 == truth.fields()
        assert v3 == {**truth.fields(), "mrz": list(truth.mrz) if truth.mrz else None,
                      "printed": {"name": truth.name, "id_number": truth.id_number}}
        if truth.mrz:
            zones += 1
            result = parse(v3["mrz"], TODAY)
            assert result is not None and result.valid
            assert (result.name, result.number, result.expiry_date.isoformat()) == \
                (truth.name, truth.id_number, truth.expiry_date)
    assert zones == 5
    assert all(r.mistakes == [] and r.requests == 2 for r in server.records().values())


def test_idflow_backend_gets_the_truth_at_rate_zero(serve: Any, pages: list[PreparedImage]) -> None:
    server = serve()
    settings = OpenAISettings(base_url=server.base_url, api_key=server.config.api_key, model=server.config.model,
                              timeout_s=10, max_attempts=1)

    async def go() -> list[Any]:
        backend = OpenAICompatBackend(settings, concurrency=2)
        try:
            return await backend.extract(pages)
        finally:
            await backend.aclose()

    results = asyncio.run(go())
    truths = {(t.path, t.page): t for t in server.pages.values()}
    for r in results:
        assert isinstance(r, Extraction), r
        truth = truths[(r.ref.rel_path, r.ref.page)]
        assert {k: r.fields[k] for k in FIELDS} == {k: truth.value(k) for k in FIELDS}
    assert len(server.records()) == len(pages)


def test_an_unknown_image_is_a_clear_error(serve: Any, pages: list[PreparedImage]) -> None:
    server = serve()
    other = dataclasses.replace(pages[0], pixels=pages[0].pixels[:-8])
    with pytest.raises(openai.BadRequestError) as err:
        ask(server, other)
    assert err.value.status_code == 400 and "unknown image" in str(err.value)
    assert err.value.body["code"] == "unknown_image"


def test_mistakes_follow_the_seed_and_the_record_says_what_changed(serve: Any, pages: list[PreparedImage]) -> None:
    rates = MistakeRates.uniform(0.5)
    first, again, other = serve(rates=rates, seed=3), serve(rates=rates, seed=3), serve(rates=rates, seed=4)
    contents = {name: [ask(s, p).choices[0].message.content for p in pages]
                for name, s in (("first", first), ("again", again), ("other", other))}
    assert contents["first"] == contents["again"] != contents["other"]
    assert [ask(first, p).choices[0].message.content for p in pages[:3]] == contents["first"][:3]
    records = first.records()
    assert len(records) == len(pages) and sum(len(r.mistakes) for r in records.values()) >= 10
    for page, content in zip(pages, contents["first"]):
        sha = first.sha_of(page.ref.rel_path, page.ref.page)
        truth, record, got = first.pages[sha], records[sha], json.loads(content)
        changed = {f for f in FIELDS if got[f] != truth.value(f)}
        if got["mrz"] != (list(truth.mrz) if truth.mrz else None):
            changed.add("mrz")
        assert changed <= {m.field for m in record.mistakes}  # every change recorded (two may cancel out)
        last = {m.field: m.given for m in record.mistakes}  # each kind applies to what the previous left
        for f, given in last.items():
            assert given in got["mrz"] if f == "mrz" else given == got[f]
        assert got["printed"] == {"name": got["name"], "id_number": got["id_number"]}  # one reading, two copies
    served = httpx.get(f"{first.base_url}/mistakes", timeout=60).json()
    assert served["seed"] == 3 and {p["image_sha256"]: p["mistakes"] for p in served["pages"]} == \
        {sha: [m.as_dict() for m in r.mistakes] for sha, r in records.items()}


def value_span(content: str, value: str) -> range:
    """Characters of the first occurrence of a field's value (quoted) in the answer text."""
    start = content.index(json.dumps(value, ensure_ascii=False)) + 1
    return range(start, start + len(value))


def test_logprobs_are_lower_on_altered_values(serve: Any, pages: list[PreparedImage]) -> None:
    """The lowest token probability of a field's value (what a client uses) is lower, on average, for a value a
    mistake altered than for a right one; a wrong value is not always low."""
    right, wrong = [], []
    for seed in range(4):
        server = serve(rates=MistakeRates.uniform(0.35), seed=seed)
        for page in pages:
            response = ask(server, page, logprobs=True, top_logprobs=2)
            content = response.choices[0].message.content
            tokens = response.choices[0].logprobs.content
            assert "".join(t.token for t in tokens) == content
            assert all(t.bytes == list(t.token.encode()) and len(t.top_logprobs) == 2 for t in tokens)
            starts = [0]
            for t in tokens:
                starts.append(starts[-1] + len(t.token))
            record = server.records()[server.sha_of(page.ref.rel_path, page.ref.page)]
            altered = {m.field for m in record.mistakes}
            got = json.loads(content)
            for f in FIELDS:
                if got[f] is None:
                    continue
                span = value_span(content, got[f])
                lowest = min(math.exp(t.logprob) for t, a, b in zip(tokens, starts, starts[1:])
                             if a < span.stop and b > span.start)
                (wrong if f in altered else right).append(lowest)
    assert len(wrong) >= 10 and len(right) >= 30
    assert sum(wrong) / len(wrong) < sum(right) / len(right) - 0.2
    assert max(wrong) > min(right)  # overlap


def test_logprobs_refused_or_ignored_as_providers_do(serve: Any, pages: list[PreparedImage]) -> None:
    refusing = serve(logprobs="refuse")
    with pytest.raises(openai.BadRequestError) as err:
        ask(refusing, pages[0], logprobs=True)
    assert "logprobs" in str(err.value)
    assert answer(ask(refusing, pages[0]))  # without the parameter it answers
    assert [r.status for r in refusing.chat_requests()] == [400, 200]
    ignoring = serve(logprobs="ignore")
    response = ask(ignoring, pages[0], logprobs=True)
    assert response.choices[0].logprobs is None and answer(response)
    answering = serve(chat=ServerConfig(model="other-vlm"))
    assert ask(answering, pages[0], logprobs=True).choices[0].logprobs.content


def test_standalone_server_prints_ready_and_serves(pages: list[PreparedImage]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.mistake_server", "--manifest", str(MANIFEST),
                             "--error-rate", "0.05", "--logprobs", "--seed", "1", "--port", "0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()  # blocks until the pages are indexed, or the process ends
        assert line.startswith("READY http://127.0.0.1:"), proc.stderr.read() if proc.poll() is not None else line
        url = line.split()[1]
        c = openai.OpenAI(base_url=url, api_key=ServerConfig.api_key, max_retries=0, timeout=60)
        response = c.chat.completions.create(
            model=ServerConfig.model, temperature=0, logprobs=True,
            messages=[{"role": "user", "content": [
                {"type": "text", "text": V3},
                {"type": "image_url", "image_url": {"url": jpeg_data_url(encode_jpeg(pages[0].pixels))}}]}])
        assert json.loads(response.choices[0].message.content)["doc_type"] == "cn_id"
        assert response.choices[0].logprobs.content
        served = httpx.get(f"{url}/mistakes", timeout=60).json()
        assert served["rates"] == dataclasses.asdict(MistakeRates.uniform(0.05)) and len(served["pages"]) == 1
    finally:
        proc.terminate()
        proc.wait(timeout=20)
