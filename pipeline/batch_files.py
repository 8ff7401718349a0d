"""Offline batch files: prepared pages out as OpenAI Batch JSONL, answers back in as extractions.

Why: `vllm run-batch` or a provider's batch API can process a night's documents unattended and cheaper than
live requests. Each request line is exactly what `OpenAICompatBackend` sends for the page (its prompt, image
encoding, `response_format`, `max_tokens`, temperature 0), so answers go through the same parsing and, in the
caller, the same validation. There is no repair turn: a batch is one shot per page.

Why a manifest beside the requests (`FILE.manifest.jsonl`): the results table needs each page's source path
and preparation facts (sizes, rotation, visual tokens), and the batch format allows only `custom_id`, which is
the document key `sha256:page`. The manifest keeps them, plus the pages that failed before any request, so an
import accounts for every page of the export without the source files or the preparation code.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import AsyncIterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import httpx
import openai

from pipeline.backends.answer_parsing import AnswerError, parse_answer
from pipeline.backends.http_errors import classify
from pipeline.backends.openai_compat import RAW_LIMIT, encode_jpeg, jpeg_data_url, response_format, user_message
from pipeline.config import OpenAISettings
from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage, Reason
from pipeline.prompts import PROMPT_VERSION, load_prompt

log = logging.getLogger(__name__)

BACKEND = "batch"
CHAT_URL = "/v1/chat/completions"
MANIFEST_FORMAT = 1
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([^"]+)"')  # to attribute a line that is not valid JSON


def manifest_path(requests_path: Path) -> Path:
    """`requests.jsonl` -> `requests.manifest.jsonl`."""
    return requests_path.with_name(f"{requests_path.stem}.manifest.jsonl")


def request_line(page: PreparedImage, *, request: OpenAISettings, model: str) -> dict[str, Any]:
    """One Batch API line: the chat request the OpenAI-compatible backend sends for this page."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [user_message(load_prompt(request.prompt_lang), jpeg_data_url(encode_jpeg(page.pixels)))],
        "temperature": 0,
        "max_tokens": request.max_tokens,
    }
    if request.use_json_schema:
        body["response_format"] = response_format()
    return {"custom_id": page.ref.key, "method": "POST", "url": CHAT_URL, "body": body}


@dataclass(frozen=True, slots=True)
class ExportSummary:
    requests: int
    failures: int  # pages that failed before a request could be made (kept in the manifest)
    requests_path: Path
    manifest_path: Path


async def export_requests(items: AsyncIterable[PreparedImage | Failure], path: Path, *, request: OpenAISettings,
                          model: str, fingerprint: str) -> ExportSummary:
    """Write the requests file and its manifest, streaming (one page's pixels in memory at a time). Both files
    appear under their final names only when complete."""
    manifest = manifest_path(path)
    header = {"idflow_batch_manifest": MANIFEST_FORMAT, "model": model, "fingerprint": fingerprint,
              "prompt": PROMPT_VERSION, "requests": path.name}
    seen: set[str] = set()
    counts = {"requests": 0, "failures": 0}
    with _atomic(path) as requests_out, _atomic(manifest) as manifest_out:
        _write(manifest_out, header)
        async for item in items:
            if isinstance(item, Failure):
                counts["failures"] += 1
                _write(manifest_out, {"failure": _failure_json(item)})
                continue
            if item.ref.key in seen:
                raise ValueError(f"page {item.ref.key} given twice: custom_id must be unique in a batch")
            seen.add(item.ref.key)
            counts["requests"] += 1
            _write(requests_out, request_line(item, request=request, model=model))
            _write(manifest_out, {"custom_id": item.ref.key, "ref": _ref_json(item.ref),
                                  "prepared": _prepared_json(item)})
    return ExportSummary(counts["requests"], counts["failures"], path, manifest)


@dataclass(slots=True)
class BatchManifest:
    """What an export recorded: one metadata-only PreparedImage (no pixels) per request, in export order."""

    model: str
    fingerprint: str
    pages: dict[str, PreparedImage]
    failures: list[Failure]


def read_manifest(path: Path) -> BatchManifest:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines or lines[0].get("idflow_batch_manifest") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not an idflow batch manifest (written by `idflow batch export`)")
    header, entries = lines[0], lines[1:]
    pages = {e["custom_id"]: _prepared_from_json(e) for e in entries if "custom_id" in e}
    failures = [Failure(**{**e["failure"], "reason": Reason(e["failure"]["reason"])}) for e in entries
                if "failure" in e]
    return BatchManifest(header["model"], header["fingerprint"], pages, failures)


def find_manifest(output_path: Path) -> Path | None:
    """The manifest next to a batch output file, when exactly one is there (outputs are renamed freely)."""
    candidates = sorted(output_path.parent.glob("*.manifest.jsonl"))
    return candidates[0] if len(candidates) == 1 else None


@dataclass(slots=True)
class ImportReport:
    outcomes: list[Extraction | Failure]  # one per page of the manifest, in its order
    unattributed_lines: int  # output lines with no known custom_id (counted, and their page fails as missing)


def import_responses(path: Path, manifest: BatchManifest) -> ImportReport:
    """Turn a Batch API output file into one Extraction or Failure per exported page (validation is the
    caller's). A page without a usable line fails retryably: re-export it, or run it live."""
    answers: dict[str, Extraction | Failure] = {}
    unattributed = 0
    source = f"batch:{path.name}"
    with path.open(encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            custom_id, outcome = _read_line(line, manifest, source)
            if custom_id is None or outcome is None:
                unattributed += 1
                log.warning("%s line %d: no custom_id of this export; ignored", path.name, number)
            elif custom_id in answers:
                log.warning("%s line %d: a second answer for %s; the first is kept", path.name, number, custom_id)
            else:
                answers[custom_id] = outcome
    outcomes = [answers.get(key) or Failure.for_ref(prepared.ref, "request", Reason.SERVER_ERROR,
                                                    f"no answer for this page in {path.name}", attempts=0,
                                                    backend=BACKEND)
                for key, prepared in manifest.pages.items()]
    return ImportReport(outcomes, unattributed)


def _read_line(line: str, manifest: BatchManifest, source: str) -> tuple[str | None, Extraction | Failure | None]:
    """(custom_id, outcome) of one output line; (None, None) when the line names no page of this export. A line
    that is not JSON still fails its own page when its custom_id can be read (a truncated last line)."""
    try:
        item = json.loads(line)
    except json.JSONDecodeError as exc:
        match = _CUSTOM_ID.search(line)
        if match is None or match.group(1) not in manifest.pages:
            return None, None
        return match.group(1), Failure.for_ref(manifest.pages[match.group(1)].ref, "parse", Reason.INVALID_JSON,
                                               f"output line is not JSON ({exc.msg}); truncated file?",
                                               raw_response=line[:RAW_LIMIT], backend=BACKEND)
    custom_id = item.get("custom_id") if isinstance(item, dict) else None
    if not isinstance(custom_id, str) or custom_id not in manifest.pages:
        return None, None
    return custom_id, _answer(manifest.pages[custom_id].ref, item, manifest.model, source)


def _answer(ref: DocumentRef, item: dict[str, Any], model: str, source: str) -> Extraction | Failure:
    response = item.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    body: Any = response.get("body") if isinstance(response, dict) else None
    if status != 200 or item.get("error"):
        return _request_failure(ref, status, body, item.get("error"), model, source)
    try:
        content = body["choices"][0]["message"]["content"]
        usage = body.get("usage") or {}
    except (KeyError, IndexError, TypeError):
        return Failure.for_ref(ref, "parse", Reason.NO_JSON, "the response body has no choices[0].message",
                               raw_response=json.dumps(body)[:RAW_LIMIT], backend=BACKEND)
    try:
        fields = parse_answer(content)
    except AnswerError as exc:
        return Failure.for_ref(ref, "parse", exc.reason, exc.detail, raw_response=(content or "")[:RAW_LIMIT],
                               backend=BACKEND)
    return Extraction(ref=ref, fields=fields, backend=BACKEND, model=str(body.get("model") or model),
                      raw_response=content, endpoint=source, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                      completion_tokens=int(usage.get("completion_tokens") or 0))


def _request_failure(ref: DocumentRef, status: Any, body: Any, error: Any, model: str, source: str) -> Failure:
    """A request the batch could not answer, classified as a live HTTP error would be (same reasons, same
    fixes); a line-level error without a status (e.g. `batch_expired`) is retryable."""
    if isinstance(status, int) and status != 200:
        response = httpx.Response(status, json=body, request=httpx.Request("POST", f"http://batch{CHAT_URL}"))
        # Only status_code, headers and body are read; openai >= 3 annotates its own httpx fork here.
        exc = openai.APIStatusError(f"HTTP {status}", response=response, body=body)  # type: ignore[arg-type]
        classified = classify(exc, base_url=source, model=model)
        return Failure.for_ref(ref, "request", classified.reason, classified.diagnosis, backend=BACKEND)
    message = (error.get("message") or error.get("code")) if isinstance(error, dict) else error
    return Failure.for_ref(ref, "request", Reason.SERVER_ERROR, f"batch error for this request: {message}",
                           backend=BACKEND)


# -- JSON shapes of the manifest --------------------------------------------------------------------------

def _ref_json(ref: DocumentRef) -> dict[str, Any]:
    return {"path": str(ref.path), "rel_path": ref.rel_path, "sha256": ref.sha256, "page": ref.page,
            "page_count": ref.page_count}


def _prepared_json(page: PreparedImage) -> dict[str, Any]:
    return {"original_size": list(page.original_size), "sent_size": list(page.sent_size),
            "rotation_applied": page.rotation_applied, "skew_corrected": page.skew_corrected,
            "orientation": page.orientation, "visual_tokens": page.visual_tokens}


def _prepared_from_json(entry: dict[str, Any]) -> PreparedImage:
    ref = DocumentRef(**{**entry["ref"], "path": Path(entry["ref"]["path"])})
    p = entry["prepared"]
    original_w, original_h = p["original_size"]
    sent_w, sent_h = p["sent_size"]
    return PreparedImage(ref=ref, pixels=None, original_size=(original_w, original_h), sent_size=(sent_w, sent_h),
                         rotation_applied=p["rotation_applied"], skew_corrected=p["skew_corrected"],
                         orientation=p["orientation"], visual_tokens=p["visual_tokens"])


def _failure_json(failure: Failure) -> dict[str, Any]:
    return {"rel_path": failure.rel_path, "sha256": failure.sha256, "page": failure.page, "stage": failure.stage,
            "reason": str(failure.reason), "detail": failure.detail, "attempts": failure.attempts,
            "backend": failure.backend}


def _write(out: TextIO, data: dict[str, Any]) -> None:
    out.write(json.dumps(data, ensure_ascii=False) + "\n")


class _atomic:
    """A text file written under a hidden temporary name and renamed into place when complete."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tmp = path.with_name(f".{path.name}.tmp")

    def __enter__(self) -> TextIO:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.tmp.open("w", encoding="utf-8")
        return self._file

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self._file.close()
        if exc_type is None:
            os.replace(self.tmp, self.path)
        else:
            self.tmp.unlink(missing_ok=True)
