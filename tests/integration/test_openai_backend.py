"""OpenAICompatBackend against a real chat-completions server on loopback (tests/support/chat_server.py)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import logging
import socket
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

import httpx
import numpy as np
import pytest

from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage, Reason
from pipeline.extract.model.openai_compat import OpenAICompatBackend, encode_jpeg
from pipeline.extract.model.ocr_crosscheck import as_sent
from pipeline.settings import OpenAISettings
from tests.support.chat_server import VALID_ANSWER, ChatServer, image_sha256
from tests.support.paths import REPO
from tests.support.prefect_server import wait_for

KEY = "sk-test-7f3a9c2e5b1d4f60a8e2"
Outcome = Extraction | Failure


def make_page(i: int) -> PreparedImage:
    """Distinct pixels per page, so every page has its own image hash at the server."""
    rng = np.random.default_rng(i)
    pixels = rng.integers(0, 255, size=(192, 320, 3), dtype=np.uint8)
    ref = DocumentRef(Path(f"/in/doc{i}.jpg"), f"doc{i}.jpg", f"{i:064x}")
    return PreparedImage(ref=ref, pixels=pixels, original_size=(320, 192), sent_size=(320, 192),
                         rotation_applied=0, skew_corrected=0.0, orientation="landscape", visual_tokens=60)


def sha(page: PreparedImage) -> str:
    return image_sha256(encode_jpeg(page.pixels))


def settings_for(server: ChatServer | str, **overrides: Any) -> OpenAISettings:
    """The client's settings against `server`; the embedded second reading is off unless a test turns it on: this
    file is about the HTTP client (tests/integration/test_vlm_crosscheck.py is about the second reading)."""
    base = server.base_url if isinstance(server, ChatServer) else server
    values: dict[str, Any] = dict(base_url=base, api_key=KEY, model="test-vlm", timeout_s=2.0, max_attempts=3,
                                  backoff_base_s=0.01, backoff_max_s=0.05, breaker_threshold=50, crosscheck=False)
    return OpenAISettings(**{**values, **overrides})


def run_backend(settings: OpenAISettings, pages: Sequence[PreparedImage],
                concurrency: int = 4) -> tuple[list[Outcome], OpenAICompatBackend]:
    """Results and the (closed) backend, for tests that inspect what it remembered."""
    async def go() -> tuple[list[Outcome], OpenAICompatBackend]:
        backend = OpenAICompatBackend(settings, concurrency=concurrency)
        try:
            return await backend.extract(pages), backend
        finally:
            await backend.aclose()
    return asyncio.run(go())


def run(settings: OpenAISettings, pages: Sequence[PreparedImage], concurrency: int = 4) -> list[Outcome]:
    return run_backend(settings, pages, concurrency)[0]


def assert_one_per_page(pages: Sequence[PreparedImage], results: Sequence[Outcome]) -> None:
    assert [r.ref.rel_path if isinstance(r, Extraction) else r.rel_path for r in results] == \
        [p.ref.rel_path for p in pages]
    assert all(isinstance(r, (Extraction, Failure)) for r in results)


def test_happy_path_records_ledger_and_request_shape(serve: Callable[..., ChatServer]) -> None:
    server = serve(latency_s=0.05)
    pages = [make_page(i) for i in range(6)]
    results = run(settings_for(server), pages, concurrency=3)
    assert_one_per_page(pages, results)
    for r in results:
        assert isinstance(r, Extraction)
        assert r.fields == VALID_ANSWER and r.backend == "openai" and r.model == "test-vlm"
        assert r.endpoint == server.base_url and r.attempts == 1
        assert r.prompt_tokens > 60 and r.completion_tokens > 0 and r.latency_ms >= 50
        assert r.raw_response and "ZHANG SAN" in r.raw_response
    chats = server.chat_requests()
    assert len(chats) == 6 and all(c.status == 200 and c.response_format for c in chats)
    assert {c.image_sha256 for c in chats} == {sha(p) for p in pages}
    assert server.peak_in_flight <= 3


def test_a_packed_page_is_sent_as_the_jpeg_made_while_preparing(serve: Callable[..., ChatServer]) -> None:
    """The engine packs a page on its preparation thread (`pack`): the JPEG is made there and the pixels are
    dropped, the second reading on or off; each request carries exactly that JPEG and its answer comes back for
    its page. The second reading reads that JPEG, the page the model saw."""
    server = serve(latency_s=0.02)
    pages = [make_page(i) for i in range(4)]
    backend = OpenAICompatBackend(settings_for(server), concurrency=2)
    packed = [backend.pack(p) for p in pages]
    assert all(q.pixels is None and q.sent_jpeg == encode_jpeg(p.pixels) for p, q in zip(pages, packed))
    results = run(settings_for(server), packed)
    assert_one_per_page(pages, results)
    assert all(isinstance(r, Extraction) for r in results)
    assert {c.image_sha256 for c in server.chat_requests()} == {sha(p) for p in pages}
    crosschecked = OpenAICompatBackend(settings_for(server, crosscheck=True), concurrency=2).pack(pages[0])
    assert crosschecked.pixels is None and crosschecked.sent_jpeg == packed[0].sent_jpeg
    decoded = as_sent(crosschecked).pixels
    assert decoded.shape == pages[0].pixels.shape
    from PIL import Image  # the JPEG's own pixels, in RGB order, as any decoder gives them
    sent = np.asarray(Image.open(io.BytesIO(crosschecked.sent_jpeg)).convert("RGB"))
    assert np.abs(decoded.astype(int) - sent.astype(int)).max() <= 2


def test_answers_follow_their_image(serve: Callable[..., ChatServer]) -> None:
    pages = [make_page(i) for i in range(5)]
    answers = {sha(p): {**VALID_ANSWER, "id_number": f"E0000000{i}"} for i, p in enumerate(pages)}
    results = run(settings_for(serve(answers=answers, latency_s=0.02)), pages, concurrency=5)
    assert [r.fields["id_number"] for r in results if isinstance(r, Extraction)] == \
        [f"E0000000{i}" for i in range(5)]


def test_fenced_and_prose_answers_are_accepted_without_repair(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["fenced", "prose"])
    results = run(settings_for(server), [make_page(0), make_page(1)], concurrency=1)
    assert all(isinstance(r, Extraction) and r.attempts == 1 for r in results)
    assert len(server.chat_requests()) == 2


def test_retry_after_is_honoured(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["429"], retry_after_s=0.6)
    [result] = run(settings_for(server), [make_page(0)])
    assert isinstance(result, Extraction) and result.attempts == 2
    first, second = server.chat_requests()
    assert first.status == 429 and second.status == 200
    assert second.started - first.ended >= 0.6


def test_retry_after_longer_than_limit_fails_retryable(serve: Callable[..., ChatServer]) -> None:
    server = serve(default_fault="429", retry_after_s=120)
    [result] = run(settings_for(server, max_retry_after_s=5), [make_page(0)])
    assert isinstance(result, Failure) and result.reason == Reason.RATE_LIMITED and result.retryable
    assert "120 s" in result.detail and len(server.chat_requests()) == 1


def test_server_errors_are_retried_a_bounded_number_of_times(serve: Callable[..., ChatServer]) -> None:
    server = serve(default_fault="500")
    pages = [make_page(i) for i in range(3)]
    results = run(settings_for(server, max_attempts=3), pages, concurrency=3)
    assert_one_per_page(pages, results)
    for r in results:
        assert isinstance(r, Failure) and r.stage == "request" and r.reason == Reason.SERVER_ERROR
        assert r.attempts == 3 and r.retryable and r.backend == "openai"
    assert len(server.chat_requests()) == 9


def test_timeout_then_success_and_timeout_exhausted(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["slow"], slow_s=1.5)
    [ok] = run(settings_for(server, timeout_s=0.4), [make_page(0)])
    assert isinstance(ok, Extraction) and ok.attempts == 2
    server = serve(default_fault="slow", slow_s=1.5)
    [failed] = run(settings_for(server, timeout_s=0.3, max_attempts=2), [make_page(0)])
    assert isinstance(failed, Failure) and failed.reason == Reason.TIMEOUT and failed.attempts == 2
    assert failed.retryable


def test_a_trickling_answer_ends_at_the_request_timeout(serve: Callable[..., ChatServer]) -> None:
    # Every byte arrives well within the read timeout; the answer as a whole would take ~20 s.
    server = serve(default_fault="trickle", trickle_s=0.05)
    [failed] = run(settings_for(server, timeout_s=1.0, max_attempts=1), [make_page(0)])
    assert isinstance(failed, Failure) and failed.reason == Reason.TIMEOUT and failed.retryable


@pytest.mark.parametrize("fault", ["html", "content_number"])
def test_an_answer_that_is_not_a_completion_is_a_retryable_server_error(
        serve: Callable[..., ChatServer], fault: str, caplog: pytest.LogCaptureFixture) -> None:
    server = serve(faults=[fault])
    [ok] = run(settings_for(server), [make_page(0)])
    assert isinstance(ok, Extraction) and ok.attempts == 2  # retried, then answered
    server = serve(default_fault=fault)
    with caplog.at_level(logging.DEBUG):
        [failed] = run(settings_for(server, max_attempts=2), [make_page(1)])
    assert isinstance(failed, Failure) and failed.reason == Reason.SERVER_ERROR and failed.retryable
    assert failed.stage == "request" and "is not a chat completion" in failed.detail
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an endpoint's bad answer"


def test_tokens_billed_for_a_document_that_failed_are_counted(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["non_json", "non_json"])
    [failed] = run(settings_for(server), [make_page(0)])
    assert isinstance(failed, Failure) and failed.reason == Reason.NO_JSON
    assert failed.prompt_tokens > 60 and failed.completion_tokens > 0  # two answered requests, image included


def test_dropped_connection_is_retried(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["drop"])
    [result] = run(settings_for(server), [make_page(0)])
    assert isinstance(result, Extraction) and result.attempts == 2
    assert [c.status for c in server.chat_requests()] == [0, 200]


def test_bad_request_is_not_retried_and_does_not_disable_json_schema(serve: Callable[..., ChatServer]) -> None:
    page = make_page(0)
    server = serve(faults_by_image={sha(page): ["refuse_image", "refuse_image"]})
    [result], backend = run_backend(settings_for(server, max_attempts=4), [page], concurrency=1)
    # One extra attempt without response_format (it might have been the cause), then no retry.
    assert isinstance(result, Failure) and result.reason == Reason.BAD_REQUEST and not result.retryable
    assert result.attempts == 2 and "image refused" in result.detail
    assert backend.json_schema_enabled
    [plain] = run(settings_for(server, use_json_schema=False), [make_page(1)])
    assert isinstance(plain, Extraction)


def test_response_format_refusal_falls_back_once_per_backend(serve: Callable[..., ChatServer]) -> None:
    server = serve(reject_response_format=True)
    pages = [make_page(i) for i in range(4)]
    results, backend = run_backend(settings_for(server), pages, concurrency=1)
    assert all(isinstance(r, Extraction) for r in results)
    sent = [c.response_format for c in server.chat_requests()]
    refused = sent.index(False)  # the page queued behind the first may also try before the flag flips
    assert 1 <= refused <= 2 and True not in sent[refused:] and len(sent) == len(pages) + refused
    assert not backend.json_schema_enabled


def test_unauthorized_fails_fast_stops_sending_and_never_leaks_the_key(
        serve: Callable[..., ChatServer], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = serve()
    wrong = "sk-stale-0000-1111-2222-3333"
    pages = [make_page(i) for i in range(10)]
    results = run(settings_for(server, api_key=f"  {wrong}\n"), pages, concurrency=2)
    assert_one_per_page(pages, results)
    assert all(isinstance(r, Failure) and r.reason == Reason.AUTH_ERROR and not r.retryable for r in results)
    assert len(server.chat_requests()) <= 2  # the in-flight ones; the rest were never sent
    assert "401" in results[0].detail and "doctor" in results[0].detail
    assert wrong not in repr(results) and wrong not in caplog.text  # the server echoed it back
    assert wrong[-8:] not in "".join(str(dataclasses.asdict(r)) for r in results)


def test_key_never_in_logs_or_results_on_a_mixed_run(serve: Callable[..., ChatServer],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server = serve(faults=["429", "500", "drop", "invalid", "non_json", "non_json", "fenced"], retry_after_s=0.05)
    results = run(settings_for(server), [make_page(i) for i in range(8)])
    assert len(results) == 8
    assert KEY not in caplog.text
    assert KEY not in "".join(str(dataclasses.asdict(r)) for r in results)


@pytest.mark.parametrize(("path", "expect"), [("/v1", "/v1"), ("/chat/completions", "remove /chat/completions")])
def test_wrong_path_404_is_fatal_with_diagnosis(serve: Callable[..., ChatServer], path: str, expect: str) -> None:
    server = serve()
    pages = [make_page(i) for i in range(6)]
    results = run(settings_for(server.base_url + path), pages, concurrency=1)
    assert all(isinstance(r, Failure) and r.reason == Reason.BAD_REQUEST for r in results)
    assert expect in results[0].detail and "404" in results[0].detail
    assert results[-1].attempts == 0 and results[-1].detail.startswith("not sent")
    assert len(server.requests) == 1


def test_unknown_model_is_fatal_with_diagnosis(serve: Callable[..., ChatServer]) -> None:
    server = serve()
    results = run(settings_for(server, model="Qwen3.5-2B", use_json_schema=False), [make_page(0), make_page(1)],
                  concurrency=1)
    assert all(isinstance(r, Failure) and r.reason == Reason.BAD_REQUEST for r in results)
    assert "GET /models" in results[0].detail and "Qwen3.5-2B" in results[0].detail
    assert len(server.chat_requests()) == 1


def test_one_repair_request_fixes_a_schema_violation(serve: Callable[..., ChatServer]) -> None:
    page = make_page(0)
    server = serve(faults_by_image={sha(page): ["invalid"]})
    [result] = run(settings_for(server), [page])
    assert isinstance(result, Extraction) and result.attempts == 2 and result.fields == VALID_ANSWER
    first, repair = server.chat_requests()
    assert first.n_messages == 1 and repair.n_messages == 3
    assert "expiry_date" in repair.text and "id_number" in repair.text  # the errors are quoted
    assert repair.image_sha256 == first.image_sha256
    assert result.prompt_tokens > 2 * 60  # both calls counted


def test_repair_happens_once_then_validate_failure(serve: Callable[..., ChatServer]) -> None:
    page = make_page(0)
    server = serve(faults_by_image={sha(page): ["invalid", "invalid", "invalid"]})
    [result] = run(settings_for(server), [page])
    assert isinstance(result, Failure) and result.stage == "validate"
    assert result.reason == Reason.SCHEMA_VIOLATION and result.attempts == 2
    assert result.raw_response and len(result.raw_response) <= 2000 and "01/05/2031" in result.raw_response
    assert len(server.chat_requests()) == 2


def test_non_json_twice_is_a_parse_failure(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["non_json", "non_json"])
    [result] = run(settings_for(server), [make_page(0)])
    assert isinstance(result, Failure) and result.stage == "parse" and result.reason == Reason.NO_JSON
    assert result.raw_response == "Sorry, I cannot read this document."
    assert len(server.chat_requests()) == 2


def test_semantic_problem_reason_survives_repair(serve: Callable[..., ChatServer]) -> None:
    bad_date = {**VALID_ANSWER, "expiry_date": "2031-02-30"}
    page = make_page(0)
    server = serve(answers={sha(page): bad_date})
    [result] = run(settings_for(server), [page])
    assert isinstance(result, Failure) and result.reason == Reason.INVALID_DATE and result.stage == "validate"


def test_circuit_breaker_stops_sending(serve: Callable[..., ChatServer]) -> None:
    server = serve(default_fault="503")
    pages = [make_page(i) for i in range(10)]
    results = run(settings_for(server, breaker_threshold=3, breaker_cooldown_s=60, max_attempts=2), pages,
                  concurrency=1)
    assert_one_per_page(pages, results)
    assert len(server.chat_requests()) == 3
    assert all(isinstance(r, Failure) and r.retryable for r in results)
    tail = results[2:]
    assert all(r.reason == Reason.ENDPOINT_UNAVAILABLE and "circuit open" in r.detail for r in tail)
    assert all(r.attempts == 0 for r in tail)


def test_circuit_half_opens_after_cooldown(serve: Callable[..., ChatServer]) -> None:
    server = serve(faults=["500", "500"])
    backend = OpenAICompatBackend(settings_for(server, breaker_threshold=2, breaker_cooldown_s=0.3,
                                               max_attempts=1), concurrency=1)

    async def go() -> tuple[list[Outcome], list[Outcome]]:
        first = await backend.extract([make_page(i) for i in range(3)])
        await asyncio.sleep(0.4)
        second = await backend.extract([make_page(i) for i in range(3, 5)])
        await backend.aclose()
        return first, second

    first, second = asyncio.run(go())
    # Pages are sent in the order they finish preparing, not their index: count outcomes, not positions.
    assert Counter(getattr(r, "reason", None) for r in first) == {Reason.SERVER_ERROR: 2,
                                                                  Reason.ENDPOINT_UNAVAILABLE: 1}
    assert all(isinstance(r, Extraction) for r in second)
    assert len(server.chat_requests()) == 4  # the open circuit sent nothing for the third page


def test_connection_refused_is_endpoint_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = run(settings_for(f"http://127.0.0.1:{port}/v1", breaker_threshold=2), [make_page(i) for i in range(4)],
                  concurrency=1)
    assert all(isinstance(r, Failure) and r.reason == Reason.ENDPOINT_UNAVAILABLE and r.retryable for r in results)
    assert "connection refused" in results[0].detail and "not running" not in results[0].detail
    assert "start the local server" in results[0].detail and "TAOTOKEN_BASE_URL" in results[0].detail
    assert sum(r.attempts for r in results) == 2  # then the circuit opened

    async def one_pool_endpoint() -> Outcome:  # a vLLM pool's endpoint: the fix names the pool's setting
        backend = OpenAICompatBackend(settings_for(f"http://127.0.0.1:{port}/v1", max_attempts=1), concurrency=1,
                                      name="vllm")
        try:
            return (await backend.extract([make_page(9)]))[0]
        finally:
            await backend.aclose()

    pooled = asyncio.run(one_pool_endpoint())
    assert isinstance(pooled, Failure) and "IDFLOW_VLLM_ENDPOINTS" in pooled.detail
    assert "TAOTOKEN_BASE_URL" not in pooled.detail


def test_mixed_faults_every_page_once_and_bounded(serve: Callable[..., ChatServer]) -> None:
    pattern = ["429", "500", "drop", "fenced", "prose", "invalid", "non_json", "ok", "ok", "503"]
    server = serve(faults=pattern * 6, latency_s=0.01, retry_after_s=0.05)
    pages = [make_page(i) for i in range(40)]
    results = run(settings_for(server), pages, concurrency=8)
    assert_one_per_page(pages, results)
    assert len({r.ref.key if isinstance(r, Extraction) else r.sha256 for r in results}) == 40
    assert len(server.chat_requests()) <= 40 * 2 * 3
    assert sum(r.attempts for r in results) == len(server.chat_requests())
    assert server.peak_in_flight <= 8
    assert sum(isinstance(r, Extraction) for r in results) >= 30


def test_in_flight_requests_are_bounded(serve: Callable[..., ChatServer]) -> None:
    hold = threading.Event()
    server = serve(hold=hold)  # answers wait until the test has seen the cap reached
    results: list[Extraction | Failure] = []
    runner = threading.Thread(target=lambda: results.extend(
        run(settings_for(server), [make_page(i) for i in range(20)], concurrency=5)))
    runner.start()
    try:
        wait_for(lambda: server.in_flight == 5, 60, "5 requests in flight", every=0.01)
    finally:
        hold.set()
        runner.join(timeout=120)
    assert len(results) == 20 and all(isinstance(r, Extraction) for r in results)
    assert server.peak_in_flight == 5  # reached while held (above), never exceeded


@pytest.mark.parametrize(("url", "message"), [
    ("{b64}", "expected data:image"),
    ("data:image/png;base64,{b64}", "does not match the bytes"),
])
def test_server_rejects_bad_image_urls(serve: Callable[..., ChatServer], url: str, message: str) -> None:
    """The test server itself enforces the shape the backend must send (data: prefix, matching MIME)."""
    server = serve()
    b64 = base64.b64encode(encode_jpeg(make_page(0).pixels)).decode()
    body = {"model": "test-vlm", "temperature": 0, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": url.format(b64=b64)}}]}]}
    response = httpx.post(f"{server.base_url}/chat/completions", json=body,
                          headers={"Authorization": f"Bearer {KEY}"})
    assert response.status_code == 400 and message in response.json()["error"]["message"]


def test_server_runs_as_a_standalone_process() -> None:
    """The vLLM-pool tests start several servers as processes: `python -m tests.support.chat_server`."""
    process = subprocess.Popen([sys.executable, "-m", "tests.support.chat_server", "--port", "0", "--base-path", "/v1",
                                "--api-key", KEY, "--latency", "0.05", "--fault", "500"],
                               cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().split()
        assert ready[0] == "READY" and ready[1].endswith("/v1")
        results = run(settings_for(ready[1]), [make_page(0), make_page(1)], concurrency=1)
        # Two workers encode pages in parallel, so either page may meet the one injected 500 first.
        assert all(isinstance(r, Extraction) for r in results) and sorted(r.attempts for r in results) == [1, 2]
        port = ready[1].split(":")[2].split("/")[0]
        assert httpx.get(f"http://127.0.0.1:{port}/health").json() == {"status": "ok"}
        assert httpx.get(f"http://127.0.0.1:{port}/stats").json()["chat_requests"] == 3
    finally:
        process.terminate()
        assert process.wait(timeout=10) is not None


def test_a_redirect_is_not_followed_with_the_page(serve: Callable[..., ChatServer]) -> None:
    """The SDK follows a 307 and would POST the page (personal data) to wherever it points; it is a configuration
    error naming the new address instead, and nothing reaches the other path."""
    server = serve(default_fault="redirect")
    [failed] = run(settings_for(server, max_attempts=2), [make_page(0)])
    assert isinstance(failed, Failure) and failed.reason == Reason.BAD_REQUEST and not failed.retryable
    assert "redirects to" in failed.detail and "/moved/" in failed.detail
    assert not [r for r in server.requests if r.path.startswith("/moved")]
