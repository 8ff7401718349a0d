"""Offline batch files: prepared pages out as OpenAI Batch JSONL, answers back in as extractions.

Why: `vllm run-batch` or a provider's batch API can process a night's documents unattended and cheaper than
live requests. Each request line is exactly what `OpenAICompatBackend` sends for the page (its prompt, image
encoding, `response_format`, `max_tokens`, temperature 0), so answers go through the same parsing and, in the
caller, the same validation. There is no repair turn: a batch is one shot per page.

Why a manifest beside the requests (`FILE.manifest.jsonl`): the results table needs each page's source path
and preparation facts (sizes, rotation, visual tokens), and the batch format allows only `custom_id`, which is
the document key `sha256:page`. The manifest keeps them, plus the pages that failed before any request, so an
import accounts for every page of the export without the source files or the preparation code. A manifest that
is not exactly what an export writes (hand-edited, cut short) is refused with the line at fault: a page's
identity or sizes are never guessed.

Why every odd output line costs its own page only: an output file holds a night of paid answers, so one line
that cannot be used must not lose the others. Each line is judged as the live backend judges a response
(`usage_tokens`, `answer_text`): usage that is not a count is 0 tokens, content that is not text is a retryable
`server_error`. A line that is not JSON (a file cut short) names no page for sure, so it is counted as
unattributed and its page, without a usable line, fails retryably (re-export it, or run it live). A UTF-8 BOM
is read as nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TextIO, get_args

import httpx
import openai

from pipeline.datamodel import (
    DocumentRef,
    Extraction,
    Failure,
    PreparedImage,
    Reason,
    Record,
    Skipped,
    SkipReason,
    Stage,
)
from pipeline.extract.model.http_errors import classify, not_a_completion
from pipeline.extract.model.openai_compat import (
    RAW_LIMIT,
    answer_tokens,
    encode_jpeg,
    jpeg_data_url,
    judge_answer,
    prompt_key,
    response_format,
    usage_tokens,
    user_message,
)
from pipeline.extract.model.prompts import PROMPT_VERSION, load_prompt
from pipeline.extract.registry import OPENAI
from pipeline.masking import redact
from pipeline.run.session import Done, RunSession
from pipeline.settings import OpenAISettings, Settings
from pipeline.trust.key import TableKey

log = logging.getLogger(__name__)

BACKEND = "batch"
CHAT_URL = "/v1/chat/completions"
MANIFEST_FORMAT = 1
# Only to say, in its page's failure, that a line that is not JSON seemed to name it (never to attribute it).
_CUSTOM_ID = re.compile(r'"custom_id"\s*:\s*"([^"]+)"')


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
    if request.logprobs:
        body["logprobs"] = True
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
    """The export's manifest. Raises `ValueError` naming the line at fault for anything an export does not write
    (not JSON, a missing or extra key, a value of the wrong type): the CLI turns it into a configuration error."""
    entries: list[tuple[int, Any]] = []
    # split on "\n" only: str.splitlines() would also cut at U+2028 or \x85 inside a file name
    for number, line in enumerate(path.read_text(encoding="utf-8-sig").split("\n"), 1):
        if line.strip():
            try:
                entries.append((number, json.loads(line)))
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"line {number} is not JSON ({exc})") from None
    header = entries[0][1] if entries else None
    if not isinstance(header, dict) or header.get("idflow_batch_manifest") != MANIFEST_FORMAT:
        raise ValueError(f"{path} is not an idflow batch manifest (written by `idflow batch export`)")
    for key in ("model", "fingerprint"):
        _expect(isinstance(header.get(key), str) and header[key], entries[0][0], f"the header's {key} is not text")
    pages: dict[str, PreparedImage] = {}
    failures: list[Failure] = []
    for number, entry in entries[1:]:
        if isinstance(entry, dict) and set(entry) == {"failure"}:
            failures.append(_failure_from_json(entry["failure"], number))
            continue
        _expect(isinstance(entry, dict) and set(entry) == {"custom_id", "ref", "prepared"}, number,
                "an entry holds either custom_id, ref and prepared, or failure, and nothing else")
        page = _prepared_from_json(entry, number)
        _expect(entry["custom_id"] == page.ref.key, number, "custom_id is not the ref's sha256:page")
        _expect(page.ref.key not in pages, number, f"page {page.ref.key} is listed twice")
        pages[page.ref.key] = page
    return BatchManifest(header["model"], header["fingerprint"], pages, failures)


def _expect(condition: object, number: int, problem: str) -> None:
    if not condition:
        raise ValueError(f"line {number}: {problem} (a manifest is written by `idflow batch export`; export again "
                         "rather than edit it)")


def find_manifest(output_path: Path) -> Path | None:
    """The manifest next to a batch output file, when exactly one is there (outputs are renamed freely)."""
    candidates = sorted(output_path.parent.glob("*.manifest.jsonl"))
    return candidates[0] if len(candidates) == 1 else None


@dataclass(slots=True)
class ImportReport:
    outcomes: list[Extraction | Failure]  # one per page of the manifest, in its order
    unattributed_lines: int  # lines naming no page of this export for sure (not JSON, unknown custom_id)
    duplicate_lines: int = 0  # lines for a page that already had one (the better outcome is kept)
    conflicting: list[str] = field(default_factory=list)  # pages with two different answers: the first is kept


def import_responses(path: Path, manifest: BatchManifest) -> ImportReport:
    """Turn a Batch API output file into one Extraction or Failure per exported page (validation is the
    caller's). A page without a usable line fails retryably: re-export it, or run it live.

    Several lines for one page (an output concatenated with a re-run of its failures; a provider that retried):
    whatever their order, an answer that parsed beats a model answer that did not (kept for a person in
    `raw_response`), which beats a request that failed; among equals the first line is kept. Two answers that
    parsed to different fields were both paid for, and which one is right cannot be known here (validation is
    the caller's, and passing it does not make an answer true): the first is kept, and the page is listed in
    `conflicting` so the import says so and a person can compare them.
    """
    answers: dict[str, Extraction | Failure] = {}
    named_by_broken_lines: set[str] = set()
    report = ImportReport([], 0)
    source = f"batch:{path.name}"
    with path.open(encoding="utf-8-sig", errors="replace") as lines:  # -sig: a BOM on line 1 is read as nothing
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            custom_id, outcome = _read_line(line, manifest, source)
            if custom_id is None or outcome is None:
                report.unattributed_lines += 1
                if custom_id is not None:
                    named_by_broken_lines.add(custom_id)
                log.warning("%s line %d: %s; ignored", path.name, number,
                            "not JSON (cut short?)" if custom_id else "no custom_id of this export")
                continue
            kept = answers.get(custom_id)
            if kept is None:
                answers[custom_id] = outcome
                continue
            report.duplicate_lines += 1
            if _rank(outcome) > _rank(kept):
                answers[custom_id] = outcome
                log.info("%s line %d: a better answer for %s than an earlier line's; this one is kept", path.name,
                         number, custom_id)
            elif isinstance(outcome, Extraction) and isinstance(kept, Extraction) and outcome.fields != kept.fields:
                if custom_id not in report.conflicting:
                    report.conflicting.append(custom_id)
                log.warning("%s line %d: a second, different answer for %s; the first is kept", path.name, number,
                            custom_id)
            else:
                log.info("%s line %d: a second line for %s; the first is kept", path.name, number, custom_id)
    report.outcomes = [answers.get(key) or _no_answer(prepared.ref, path.name, key in named_by_broken_lines)
                       for key, prepared in manifest.pages.items()]
    return report


def _rank(outcome: Extraction | Failure) -> int:
    """How much of an answer a line holds (see `import_responses`): a parsed answer, an unparsed one, none."""
    if isinstance(outcome, Extraction):
        return 2
    return 1 if outcome.stage == "parse" else 0


def _no_answer(ref: DocumentRef, name: str, named_by_broken_line: bool) -> Failure:
    hint = " (a line that is not JSON seems to name it: a truncated file?)" if named_by_broken_line else ""
    return Failure.for_ref(ref, "request", Reason.SERVER_ERROR, f"no answer for this page in {name}{hint}",
                           attempts=0, backend=BACKEND)


def _read_line(line: str, manifest: BatchManifest, source: str) -> tuple[str | None, Extraction | Failure | None]:
    """(custom_id, outcome) of one output line; (None, None) when the line names no page of this export;
    (custom_id, None) when the line is not JSON but seems to name that page (said in its failure, never used as
    its answer: which page a broken line belongs to is a guess). Whatever is odd inside a line of a known page
    costs that page only: an error nobody foresaw becomes its `internal_error`."""
    try:
        item = json.loads(line)
    except (ValueError, RecursionError):
        match = _CUSTOM_ID.search(line)
        return (match.group(1) if match is not None and match.group(1) in manifest.pages else None), None
    custom_id = item.get("custom_id") if isinstance(item, dict) else None
    if not isinstance(custom_id, str) or custom_id not in manifest.pages:
        return None, None
    ref = manifest.pages[custom_id].ref
    try:
        return custom_id, _answer(ref, item, manifest.model, source)
    except Exception as exc:  # noqa: BLE001 - one odd line must not cost the other answers
        return custom_id, Failure.for_ref(ref, "internal", Reason.INTERNAL_ERROR,
                                          redact(f"{type(exc).__name__}: {exc}")[:500], backend=BACKEND)


def _answer(ref: DocumentRef, item: dict[str, Any], model: str, source: str) -> Extraction | Failure:
    """One answered line, judged as the live backend judges a response (`answer_text`, `usage_tokens`)."""
    response = item.get("response")
    status = response.get("status_code") if isinstance(response, dict) else None
    body: Any = response.get("body") if isinstance(response, dict) else None
    if status != 200 or item.get("error"):
        return _request_failure(ref, status, body, item.get("error"), model, source)
    if not isinstance(body, dict):
        return _not_a_completion(ref, source, "a body that is not a JSON object", body, (0, 0))
    tokens = usage_tokens(SimpleNamespace(usage=_attributes(body.get("usage"))))
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        return Failure.for_ref(ref, "parse", Reason.NO_JSON, "the response body has no choices[0].message",
                               raw_response=json.dumps(body)[:RAW_LIMIT], backend=BACKEND,
                               prompt_tokens=tokens[0], completion_tokens=tokens[1])
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, (str, type(None))):
        return _not_a_completion(ref, source, "a choice without text content", choices[0], tokens)
    logprobs = answer_tokens(SimpleNamespace(choices=[_choice_tokens(choices[0])]))
    verdict = judge_answer(content or "", logprobs)
    if verdict.reason in (Reason.NO_JSON, Reason.INVALID_JSON):
        detail = verdict.errors[0].removeprefix("the answer is not a JSON object (").removesuffix(")")
        return Failure.for_ref(ref, "parse", verdict.reason, detail, raw_response=(content or "")[:RAW_LIMIT],
                               backend=BACKEND, prompt_tokens=tokens[0], completion_tokens=tokens[1])
    answered = Extraction(ref=ref, fields=verdict.fields, backend=BACKEND, model=str(body.get("model") or model),
                          raw_response=content, endpoint=source, prompt_tokens=tokens[0], completion_tokens=tokens[1])
    if verdict.judged is None:
        return answered  # invalid fields: the validate stage names the problem, as for a live answer
    judged = verdict.judged
    return dataclasses.replace(
        answered, field_states=judged.states, checks=judged.checks, check_failures=judged.failures,
        evidence=judged.classes, issuer=judged.issuer, embedded=judged.embedded, table_key=_table_key(answered.model))


@functools.lru_cache(maxsize=8)
def _table_key(model: str) -> TableKey:
    """Batch answers are the live backend's answers to the same request: the table of the OpenAI-compatible
    backend with this model and prompt scores them (the settings are read once, not for every answer)."""
    return TableKey(OPENAI.name, model, prompt_key(OpenAISettings().prompt_lang))


def _choice_tokens(choice: dict[str, Any]) -> Any:
    """A JSON choice's `logprobs.content` as the SDK's objects (what `answer_tokens` reads)."""
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    items = [_attributes(x) for x in content] if isinstance(content, list) else None
    return SimpleNamespace(logprobs=SimpleNamespace(content=items))


def _attributes(value: Any) -> Any:
    """A JSON object as an object with attributes (what `usage_tokens` reads from the SDK's response)."""
    return SimpleNamespace(**value) if isinstance(value, dict) else value


def _not_a_completion(ref: DocumentRef, source: str, what: str, raw: Any, tokens: tuple[int, int]) -> Failure:
    error = not_a_completion(source, what)  # the live backend's verdict: a retryable server_error
    return Failure.for_ref(ref, "request", error.reason, error.detail, raw_response=json.dumps(raw)[:RAW_LIMIT],
                           backend=BACKEND, prompt_tokens=tokens[0], completion_tokens=tokens[1])


def _request_failure(ref: DocumentRef, status: Any, body: Any, error: Any, model: str, source: str) -> Failure:
    """A request the batch could not answer, classified as a live HTTP error would be (same reasons, same
    fixes); a line-level error without a status (e.g. `batch_expired`) is retryable."""
    if type(status) is int and status != 200 and 100 <= status <= 599:
        response = httpx.Response(status, json=body, request=httpx.Request("POST", f"http://batch{CHAT_URL}"))
        # Only status_code, headers and body are read; openai >= 3 annotates its own httpx fork here.
        exc = openai.APIStatusError(f"HTTP {status}", response=response, body=body)  # type: ignore[arg-type]
        classified = classify(exc, base_url=source, model=model)
        return Failure.for_ref(ref, "request", classified.reason, classified.diagnosis, backend=BACKEND)
    message = (error.get("message") or error.get("code")) if isinstance(error, dict) else error
    if not message:
        message = f"no answer (status {json.dumps(status)})"
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


_REF_KEYS = {"path", "rel_path", "sha256", "page", "page_count"}
_PREPARED_KEYS = {"original_size", "sent_size", "rotation_applied", "skew_corrected", "orientation", "visual_tokens"}
_FAILURE_KEYS = {"rel_path", "sha256", "page", "stage", "reason", "detail", "attempts", "backend"}


def _count(value: Any, least: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _size(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(_count(v, 1) for v in value)


def _prepared_from_json(entry: dict[str, Any], number: int) -> PreparedImage:
    r, p = entry["ref"], entry["prepared"]
    _expect(isinstance(r, dict) and set(r) == _REF_KEYS, number, f"ref must hold exactly {sorted(_REF_KEYS)}")
    _expect(all(isinstance(r[k], str) and r[k] for k in ("path", "rel_path", "sha256")), number,
            "ref's path, rel_path and sha256 must be text")
    _expect(_count(r["page"]) and _count(r["page_count"], 1) and r["page"] < r["page_count"], number,
            "ref's page must be a count below page_count")
    _expect(isinstance(p, dict) and set(p) == _PREPARED_KEYS, number,
            f"prepared must hold exactly {sorted(_PREPARED_KEYS)}")
    _expect(_size(p["original_size"]) and _size(p["sent_size"]), number,
            "original_size and sent_size must be [width, height] in pixels")
    _expect(_count(p["rotation_applied"]) and p["rotation_applied"] in (0, 90, 180, 270), number,
            "rotation_applied must be 0, 90, 180 or 270")
    _expect(isinstance(p["skew_corrected"], (int, float)) and not isinstance(p["skew_corrected"], bool), number,
            "skew_corrected must be a number of degrees")
    _expect(p["orientation"] in ("landscape", "portrait"), number, "orientation must be landscape or portrait")
    _expect(_count(p["visual_tokens"]), number, "visual_tokens must be a count")
    ref = DocumentRef(path=Path(r["path"]), rel_path=r["rel_path"], sha256=r["sha256"], page=r["page"],
                      page_count=r["page_count"])
    return PreparedImage(ref=ref, pixels=None, original_size=(p["original_size"][0], p["original_size"][1]),
                         sent_size=(p["sent_size"][0], p["sent_size"][1]), rotation_applied=p["rotation_applied"],
                         skew_corrected=float(p["skew_corrected"]), orientation=p["orientation"],
                         visual_tokens=p["visual_tokens"])


def _failure_from_json(f: Any, number: int) -> Failure:
    _expect(isinstance(f, dict) and set(f) == _FAILURE_KEYS, number,
            f"failure must hold exactly {sorted(_FAILURE_KEYS)}")
    _expect(isinstance(f["rel_path"], str) and f["rel_path"] and isinstance(f["detail"], str), number,
            "failure's rel_path and detail must be text")
    _expect(f["sha256"] is None or isinstance(f["sha256"], str), number, "failure's sha256 must be text or null")
    _expect(f["page"] is None or _count(f["page"]), number, "failure's page must be a count or null")
    _expect(f["stage"] in get_args(Stage), number, f"failure's stage must be one of {list(get_args(Stage))}")
    _expect(f["reason"] in {str(r) for r in Reason}, number, "failure's reason is not a reason code")
    _expect(_count(f["attempts"]), number, "failure's attempts must be a count")
    _expect(f["backend"] is None or isinstance(f["backend"], str), number, "failure's backend must be text or null")
    return Failure(rel_path=f["rel_path"], sha256=f["sha256"], page=f["page"], stage=f["stage"],
                   reason=Reason(f["reason"]), detail=f["detail"], attempts=f["attempts"], backend=f["backend"])


def _failure_json(failure: Failure) -> dict[str, Any]:
    return {"rel_path": failure.rel_path, "sha256": failure.sha256, "page": failure.page, "stage": failure.stage,
            "reason": str(failure.reason), "detail": failure.detail, "attempts": failure.attempts,
            "backend": failure.backend}


def _write(out: TextIO, data: dict[str, Any]) -> None:
    """One JSON line, names readable as they are; a name that is not UTF-8 on disk (a lone surrogate in Python)
    makes its line ASCII with `\\u` escapes, which `json.loads` reads back to the very same name."""
    line = json.dumps(data, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(data)
    out.write(line + "\n")


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


async def store_import(out: Path, run_id: str, file: Path, recorded: BatchManifest, report: ImportReport,
                       outcomes: list[Record | Failure], settings: Settings, *, wait: bool,
                       on_wait: Callable[[str], object] | None = None) -> dict[str, Any]:
    """Write the imported outcomes as a run (`RunSession`) and return its summary, written with a run's
    accounting (`seen = results + failures + skipped`) and naming the exported folder so the retry can find
    failed documents again.

    A page counts as done, and is skipped as `already_done` (neither its answer nor its failure stored), when OUT
    holds a result for it made by *any* run, not only one with the import's fingerprint. Why: an import does not
    extract anything; it can only add a second, competing row for a document that already has one, and the usual
    way there is the same model read the page live (`--backend vllm` has another fingerprint than the export's,
    which says `openai`) or the same output imported twice. Skipping is visible (the import says how many, and
    why) and undone by importing the file into another folder; a second row is silent and undone only by editing
    Parquet parts. Pages that only failed before are not done: their new outcome is stored, as a run tries
    failures again, unless a person has decided on them (final)."""
    # The summary as a run of the export's request would have it (model, prices), then what is the import's.
    as_run = settings.model_copy(update={"backend": OPENAI.name, "openai": settings.openai.model_copy(
        update={"model": recorded.model})})
    async with RunSession.open(out, run_id=run_id, settings=as_run, fingerprint=recorded.fingerprint,
                               done=Done.ANY_RESULT, wait=wait, on_wait=on_wait, journal=False) as run:
        done = set(run.done)
        for outcome in outcomes:
            run.see()
            rel_path, sha256, page = _identity(outcome)
            key = f"{sha256}:{page}"
            if sha256 is not None and key in done:
                outcome = Skipped(rel_path, SkipReason.ALREADY_DONE, sha256, page)
            elif isinstance(outcome, Record):
                done.add(key)
            run.record(outcome)
        run.summary_extra.update({"backend": "batch", "fingerprint": recorded.fingerprint,
                                  "source_dir": _export_root(recorded), "out_dir": str(out),
                                  "batch_output": str(file), "unattributed_lines": report.unattributed_lines,
                                  "duplicate_lines": report.duplicate_lines,
                                  "conflicting_answers": len(report.conflicting)})
    assert run.summary is not None
    return run.summary


def _identity(outcome: Record | Failure) -> tuple[str, str | None, int | None]:
    """(relative path, sha256, page) of an outcome: its document key is `sha256:page` (none without a hash)."""
    if isinstance(outcome, Record):
        ref = outcome.extraction.ref
        return ref.rel_path, ref.sha256, ref.page
    return outcome.rel_path, outcome.sha256, outcome.page


def _export_root(recorded: BatchManifest) -> str | None:
    """The folder the export read (a page's path minus its relative path), for locating failed files later."""
    for page in recorded.pages.values():
        path, rel = str(page.ref.path), page.ref.rel_path
        if path.endswith(rel):
            return path[: len(path) - len(rel)].rstrip("/") or "/"
    return None
