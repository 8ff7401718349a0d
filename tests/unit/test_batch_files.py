"""Offline batch files: export -> an output file written here as `vllm run-batch` / a batch API would ->
import through the same parsing and validation, with every page accounted for."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
from typer.testing import CliRunner

from idflow.batch import batch_app
from pipeline.datamodel import Extraction, Failure, Reason
from pipeline.extract.model.openai_compat import OpenAICompatBackend
from pipeline.ops.batch_files import (
    ImportReport,
    export_requests,
    find_manifest,
    import_responses,
    manifest_path,
    read_manifest,
)
from pipeline.settings import OpenAISettings
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from tests.support.chat_server import VALID_ANSWER
from tests.support.pages import make_page

MODEL = "qwen3.5-2b"
REQUEST = OpenAISettings(base_url="http://127.0.0.1:9/v1", api_key="sk-batch-test", model=MODEL)


def export(tmp_path: Path, n: int = 8) -> tuple[Path, list[Any]]:
    pages = [make_page(i) for i in range(n)]
    broken = Failure("broken.jpg", "f" * 64, None, "preprocess", Reason.DECODE_ERROR, "cannot decode")
    path = tmp_path / "requests.jsonl"
    async def items() -> AsyncIterator[Any]:
        for item in [*pages[:3], broken, *pages[3:]]:
            yield item

    summary = asyncio.run(export_requests(items(), path, request=REQUEST, model=MODEL, fingerprint="fp-test"))
    assert (summary.requests, summary.failures) == (n, 1) and summary.manifest_path == manifest_path(path)
    return path, pages


def completion(content: str) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": MODEL,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 700, "completion_tokens": 40, "total_tokens": 740}}


def output_line(custom_id: str, status: int = 200, body: Any = None, error: Any = None) -> str:
    """One line of a Batch API output file."""
    response = None if status == 0 else {"status_code": status, "request_id": f"req-{custom_id[-4:]}", "body": body}
    return json.dumps({"id": f"batch_req_{custom_id[-6:]}", "custom_id": custom_id, "response": response,
                       "error": error})


def test_export_writes_the_batch_format_and_a_manifest(tmp_path: Path) -> None:
    path, pages = export(tmp_path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["custom_id"] for line in lines] == [p.ref.key for p in pages]
    for line in lines:
        assert set(line) == {"custom_id", "method", "url", "body"}
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        body = line["body"]
        assert body["model"] == MODEL and body["temperature"] == 0 and body["max_tokens"] == 256
        assert body["response_format"]["type"] == "json_schema"
        [message] = body["messages"]
        assert message["content"][1]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    manifest = read_manifest(manifest_path(path))
    assert manifest.model == MODEL and manifest.fingerprint == "fp-test"
    assert list(manifest.pages) == [p.ref.key for p in pages]
    assert manifest.pages[pages[2].ref.key].visual_tokens == pages[2].visual_tokens
    assert [f.reason for f in manifest.failures] == [Reason.DECODE_ERROR]
    assert not list(tmp_path.glob(".*.tmp"))  # written under temporary names, renamed when complete


def test_exported_body_is_exactly_what_the_backend_sends(tmp_path: Path) -> None:
    """The guard against drift: run the real backend over a transport that records its request."""
    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json=completion(json.dumps(VALID_ANSWER)))

    async def go() -> None:
        client = openai.AsyncOpenAI(api_key="sk-batch-test", base_url=REQUEST.base_url, max_retries=0,
                                    http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)))
        backend = OpenAICompatBackend(REQUEST, concurrency=1, client=client)
        try:
            await backend.extract([make_page(0)])
        finally:
            await backend.aclose()

    asyncio.run(go())
    path, _ = export(tmp_path, n=1)
    assert json.loads(path.read_text().splitlines()[0])["body"] == sent[0]


def test_round_trip_with_malformed_lines(tmp_path: Path) -> None:
    path, pages = export(tmp_path)
    keys = [p.ref.key for p in pages]
    fenced = f"```json\n{json.dumps({**VALID_ANSWER, 'name': 'LI SI'})}\n```"
    lines = [
        output_line(keys[0], body=completion(json.dumps(VALID_ANSWER))),
        output_line(keys[1], body=completion(fenced)),  # accepted, as live
        output_line(keys[2], body=completion("Sorry, I cannot read this document.")),
        output_line(keys[3], 400, {"error": {"message": "Image too large: 9000x9000 exceeds the maximum"}}),
        output_line(keys[4], 0, error={"code": "batch_expired", "message": "This request could not be executed "
                                                                           "before the completion window expired."}),
        output_line(keys[5], body=completion(json.dumps(VALID_ANSWER)))[:-40],  # a write cut short
        output_line(keys[6], body={"object": "chat.completion"}),  # no choices
        "this is not a batch line at all",
        output_line("e" * 64 + ":0", body=completion("{}")),  # not from this export
        output_line(keys[0], body=completion("{}")),  # a second, different answer: the first one counts, said so
        # keys[7]: no line at all
    ]
    output = tmp_path / "results.jsonl"
    output.write_text("\n".join(lines) + "\n")
    report = import_responses(output, read_manifest(manifest_path(path)))
    # the line cut short cannot be attributed for sure: unattributed, and its page has no usable line
    assert isinstance(report, ImportReport) and report.unattributed_lines == 3
    assert report.duplicate_lines == 1 and report.conflicting == [keys[0]]
    outcomes = report.outcomes
    assert [o.ref.key if isinstance(o, Extraction) else f"{o.sha256}:{o.page}" for o in outcomes] == keys
    first, second = outcomes[0], outcomes[1]
    assert isinstance(first, Extraction) and first.fields == VALID_ANSWER and first.backend == "batch"
    assert first.endpoint == "batch:results.jsonl" and first.model == MODEL and first.prompt_tokens == 700
    assert isinstance(second, Extraction) and second.fields["name"] == "LI SI"
    failures = {i: o for i, o in enumerate(outcomes) if isinstance(o, Failure)}
    assert set(failures) == {2, 3, 4, 5, 6, 7}
    assert (failures[2].stage, failures[2].reason) == ("parse", Reason.NO_JSON)
    assert failures[2].raw_response == "Sorry, I cannot read this document."
    assert failures[3].reason == Reason.BAD_REQUEST and "IDFLOW_MAX_PIXELS" in failures[3].detail
    assert failures[4].reason == Reason.SERVER_ERROR and failures[4].retryable and "expired" in failures[4].detail
    assert failures[5].reason == Reason.SERVER_ERROR and failures[5].retryable and "truncated" in failures[5].detail
    assert failures[6].reason == Reason.NO_JSON and "choices" in failures[6].detail
    assert failures[7].retryable and "no answer for this page" in failures[7].detail
    assert all(f.backend == "batch" and f.rel_path.startswith("doc") for f in failures.values())


def test_cli_import_writes_validated_results_and_the_failure_queue(tmp_path: Path) -> None:
    path, pages = export(tmp_path, n=3)
    keys = [p.ref.key for p in pages]
    bad_date = {**VALID_ANSWER, "expiry_date": "2031-02-30"}
    output = tmp_path / "batch_out.jsonl"
    output.write_text("\n".join([output_line(keys[0], body=completion(json.dumps(VALID_ANSWER))),
                                 output_line(keys[1], body=completion(json.dumps(bad_date))),
                                 output_line(keys[2], 500, {"error": {"message": "engine died"}})]) + "\n")
    assert find_manifest(output) == manifest_path(path)
    out = tmp_path / "out"
    result = CliRunner().invoke(batch_app, ["import", str(output), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "1 results, 3 failures" in result.output  # 2 answers failed + 1 page failed before export
    results = read_table(out, RESULTS).to_pylist()
    assert [(r["source_path"], r["id_number"], r["backend"], r["fingerprint"]) for r in results] == \
        [("doc0.jpg", "E12345678", "batch", "fp-test")]
    assert results[0]["visual_tokens"] == pages[0].visual_tokens and results[0]["sent_width"] == 320
    failures = {r["source_path"]: r for r in read_table(out, FAILURES).to_pylist()}
    assert failures["doc1.jpg"]["stage"] == "validate" and failures["doc1.jpg"]["reason"] == "invalid_date"
    assert failures["doc2.jpg"]["reason"] == "server_error" and failures["doc2.jpg"]["retryable"]
    assert failures["broken.jpg"]["reason"] == "decode_error"


def test_cli_export_prepares_the_sample_folder(tmp_path: Path, sample_dir: Path) -> None:
    scans = tmp_path / "scans"
    scans.mkdir()
    for name in ("cn_front.jpg", "id_card_td1.jpg", "broken.jpg"):
        shutil.copy(sample_dir / name, scans / name)
    target = tmp_path / "batch" / "requests.jsonl"
    result = CliRunner().invoke(batch_app, ["export", str(scans), str(target), "--model", MODEL])
    assert result.exit_code == 0, result.output
    manifest = read_manifest(manifest_path(target))
    requests = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted(p.ref.rel_path for p in manifest.pages.values()) == ["cn_front.jpg", "id_card_td1.jpg"]
    assert [r["custom_id"] for r in requests] == list(manifest.pages)
    assert all(0 < p.visual_tokens <= 1024 for p in manifest.pages.values())
    assert [f.rel_path for f in manifest.failures] == ["broken.jpg"]


def test_a_file_name_that_is_not_utf8_goes_out_and_comes_back_exactly(tmp_path: Path, sample_dir: Path) -> None:
    """Export wrote its manifest with `ensure_ascii=False` and crashed on such a name (UnicodeEncodeError)."""
    scans = tmp_path / "scans"
    scans.mkdir()
    name = os.fsdecode(b"caf\xe9 \xff.jpg")  # Latin-1 bytes, as a Windows share copied over gives them
    shutil.copy(sample_dir / "id_card_td1.jpg", scans / name)
    target = tmp_path / "batch" / "requests.jsonl"
    result = CliRunner().invoke(batch_app, ["export", str(scans), str(target), "--model", MODEL])
    assert result.exit_code == 0, result.output
    (page,) = read_manifest(manifest_path(target)).pages.values()
    assert page.ref.rel_path == name and page.ref.path == scans / name
    target.read_text(encoding="utf-8")  # both files stay valid UTF-8
    manifest_path(target).read_text(encoding="utf-8")

    output = tmp_path / "batch" / "results.jsonl"
    output.write_text(output_line(page.ref.key, body=completion(json.dumps(VALID_ANSWER))) + "\n")
    result = CliRunner().invoke(batch_app, ["import", str(output), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    (row,) = read_table(tmp_path / "out", RESULTS).to_pylist()
    assert row["source_path_bytes"] == b"caf\xe9 \xff.jpg" and row["source_path"] == "caf\\xe9 \\xff.jpg"
