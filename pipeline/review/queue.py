"""What needs a person: failures and records below the auto-accept threshold, of one run or of the whole output
folder, in the order a reviewer should take them (`ReviewQueue.items`).

Order, most in need of a person first: failures the machine will never fix (not retryable), then records
whose number another document of OUT shows with another name or expiry date (`pipeline.review.conflicts`; each
such pair side by side), then records below the threshold (least confident first), then retryable failures (the
retry flow tries those again first), and last what is settled already (a person decided, or a later run produced
a result). A record in such a conflict is listed whatever its confidence: it is never auto-accepted.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Literal

from pipeline.datamodel import FIELD_NAMES, Reason
from pipeline.extract.model.answer_parsing import AnswerError, parse_answer
from pipeline.prepare import Orientation
from pipeline.review.conflicts import CONFLICT_REASON, Conflict, find_conflicts
from pipeline.review.corrections import latest_corrections
from pipeline.review.failure_queue import current_failures, input_dirs
from pipeline.review.thumbnails import RunThumbnails, Thumbnail, locate, thumbnail
from pipeline.settings import PrepareSettings, ReviewSettings
from pipeline.store.parquet import (
    FAILURES,
    RESULTS,
    RUNS,
    latest_results,
    latest_run_summary,
    read_table,
    run_input_dir,
    source_file_name,
)

MAX_PICTURES = 200


REASON_TEXT: dict[str, str] = {
    "unsupported_type": "The file is not an image or PDF idflow can read.",
    "empty_file": "The file is empty.",
    "unreadable": "The file could not be opened (damaged container or no permission).",
    "too_many_pixels": "The image is implausibly large (decompression-bomb guard).",
    "symlink_outside_root": "A link pointing outside the input folder; not followed.",
    "not_a_regular_file": "Not a file (a pipe, socket or device); never opened.",
    "broken_symlink": "A link whose target does not exist, or a loop of links.",
    "path_too_long": "The path is too long for the system to open.",
    "too_large": "The file is over the size limit (IDFLOW_MAX_INPUT_BYTES).",
    "changed_during_run": "The file changed or vanished while it was being read; the retry flow tries again.",
    "decode_error": "The image data is damaged or cut off and cannot be decoded.",
    "too_small": "The page is too small to read anything.",
    "prepare_crashed": "Decoding this page crashed or hung the program, twice (the second time alone): the file "
                       "is probably damaged; open it yourself, or ask for a new scan.",
    "timeout": "The model did not answer in time; the retry flow tries again.",
    "rate_limited": "The model service asked us to slow down; the retry flow tries again.",
    "server_error": "The model service failed; the retry flow tries again.",
    "endpoint_unavailable": "The model service was down; the retry flow tries again.",
    "auth_error": "The model service refused our key: fix the configuration, then rerun.",
    "bad_request": "The model service rejected the request (e.g. the image).",
    "no_json": "The model answered, but not with the fields asked for.",
    "invalid_json": "The model's answer was cut off or malformed.",
    "schema_violation": "A value read does not have the form the field requires.",
    "checksum_failed": "A check digit does not match and nothing else on the page was read (with other fields "
                       "read, the document is a result whose refuted field is unreadable).",
    "invalid_date": "A date read is not a real calendar date.",
    "cross_check_failed": "Two places on the document disagree.",
    "no_fields_found": "No name, document number or expiry date was found on the page.",
    "internal_error": "idflow itself failed on this document (a bug); it is kept here so it is not lost.",
    "low_confidence": "Read and valid, but the least sure field is below the auto-accept threshold.",
    CONFLICT_REASON: "Another document in this output folder has the same number with another name or expiry "
                     "date: one of them is misread, or the number is used twice. Check both.",
}
# The reasons of records a person sees (the others are failure reason codes).
RECORD_REASONS: tuple[str, ...] = ("low_confidence", CONFLICT_REASON)

Kind = Literal["failure", "low_confidence", "conflict"]


@dataclass(frozen=True)
class FieldView:
    value: str | None
    state: str | None  # present | absent | unreadable; None when unknown (failed documents)
    confidence: float | None


@dataclass
class ReviewItem:
    """One document a person should look at, with what the machine made of it."""

    kind: Kind
    source_path: str
    sha256: str | None
    page: int | None
    reason: str  # failure reason code, or one of RECORD_REASONS
    stage: str | None
    detail: str | None
    retryable: bool
    confidence: float | None  # least field confidence of a record; None for failures
    fields: dict[str, FieldView]
    doc_type: str | None
    orientation: str | None
    checks: list[str]
    check_failures: list[str]
    correction: dict[str, Any] | None = None  # the latest person's decision, if any
    resolved_by_run: str | None = None  # a later run that produced a result for a failure
    thumbnail: Thumbnail = field(default_factory=lambda: Thumbnail(None, "no picture made"))
    file_name: str = ""  # the relative path as the file system has it (`source_path` is its readable text)
    run_id: str | None = None  # the run that made the record or the (latest) failure
    turned: Orientation | None = None  # how the run turned a record's page (None: a failure, found again)
    conflict: Conflict | None = None  # the other documents with this record's number and other values
    issuer: str | None = None  # a record's issuing state or country, where the page states it
    expired: bool | None = None  # a record's expiry before its run's date (None: unknown, long-term, a failure)

    @property
    def key(self) -> str | None:
        """`sha256:page`, the document's identity; None for a file that could not even be hashed."""
        return None if self.sha256 is None else f"{self.sha256}:{self.page or 0}"

    @property
    def anchor(self) -> str:
        """HTML id of the item on the review page (stable across processes: the flow links to it)."""
        if self.sha256 is None:
            return "file-" + hashlib.sha256(self.source_path.encode()).hexdigest()[:16]
        return f"doc-{self.sha256[:16]}-{self.page or 0}"

    @property
    def nothing_read(self) -> bool:
        """A failure before any field was read (no model answer to show)."""
        return self.doc_type is None and all(f.state is None for f in self.fields.values())

    @property
    def settled(self) -> bool:
        return self.correction is not None or self.resolved_by_run is not None

    @property
    def reason_text(self) -> str:
        return REASON_TEXT.get(self.reason, self.reason)

    @property
    def rank(self) -> tuple[int, float, str, int]:
        """Sort key: most in need of a person first (see the module docstring)."""
        if self.settled:
            group = 3
        elif self.kind == "failure":
            group = 2 if self.retryable else 0
        else:
            group = 1
        if self.conflict is not None and not self.settled:  # first among the records, a pair side by side
            return group, -1.0, f"{self.conflict.reading.group}\0{self.source_path}", self.page or 0
        return group, self.confidence if self.confidence is not None else 0.0, self.source_path, self.page or 0

    def machine_values(self) -> dict[str, str | None]:
        """The fields as the machine read them (prefill for a correction form)."""
        return {"doc_type": self.doc_type, **{name: self.fields[name].value for name in FIELD_NAMES}}


@dataclass
class ReviewQueue:
    out_dir: Path
    run_id: str
    threshold: float
    summary: dict[str, Any]
    items: list[ReviewItem]
    results: int  # records of the run, flagged or not
    confidences: list[float]  # least field confidence of every record of the run (for the histogram)
    whole_out: bool = False  # every run's documents (`run_id` is then the latest run's, for the page's heading)

    @property
    def open_items(self) -> list[ReviewItem]:
        return [i for i in self.items if not i.settled]

    def counts_by_reason(self) -> Counter[str]:
        return Counter(i.reason for i in self.items)


def record_confidence(row: dict[str, Any]) -> float:
    """A record's confidence: its least confident field (as in `idflow eval`'s auto-accept). A field without a
    confidence (a model's answer: nothing has measured how often such answers are right) counts as 0, so the
    record is shown to a person instead of being accepted unseen."""
    values = [row.get(f"{name}_confidence") for name in FIELD_NAMES]
    return min(0.0 if v is None else float(v) for v in values)


def run_summary(out_dir: Path, run_id: str | None) -> dict[str, Any]:
    """The summary of `run_id`, or of the latest run that read an input folder (not a retry run)."""
    if run_id is not None:
        path = out_dir / RUNS / f"{run_id}.json"
        if not path.is_file():
            raise FileNotFoundError(f"no run {run_id} in {out_dir / RUNS}")
        return json.loads(path.read_text(encoding="utf-8"))
    summaries = [json.loads(p.read_text(encoding="utf-8"))
                 for p in sorted((out_dir / RUNS).glob("*.json"), key=lambda p: p.stat().st_mtime)]
    extract_runs = [s for s in summaries if s.get("input_dir")]
    if not extract_runs:
        raise FileNotFoundError(f"no idflow run found in {out_dir}")
    return extract_runs[-1]


def _field_value(row: dict[str, Any], name: str) -> str | None:
    """A results column as the text a person would type (dates ISO, long-term expiry as `long-term`)."""
    if name == "expiry_date" and row["expiry_long_term"]:
        return "long-term"
    value = row[name]
    return value.isoformat() if isinstance(value, date) else value


def _result_item(row: dict[str, Any], confidence: float) -> ReviewItem:
    fields = {name: FieldView(_field_value(row, name), row[f"{name}_state"], row[f"{name}_confidence"])
              for name in FIELD_NAMES}
    return ReviewItem(kind="low_confidence", source_path=row["source_path"], sha256=row["sha256"], page=row["page"],
                      reason="low_confidence", stage=None, detail=None, retryable=False, confidence=confidence,
                      fields=fields, doc_type=row["doc_type"], orientation=row["orientation"],
                      checks=list(row["checks"] or []), check_failures=list(row["check_failures"] or []),
                      file_name=source_file_name(row), run_id=row["run_id"], turned=_turned(row),
                      issuer=row.get("issuer"), expired=row.get("expired"))


def _record_item(row: dict[str, Any], limit: float, conflicts: dict[str, Conflict]) -> ReviewItem | None:
    """A record as a person should see it: flagged for its number's conflict, or below the threshold; None when
    it is auto-accepted."""
    confidence = record_confidence(row)
    conflict = conflicts.get(f"{row['sha256']}:{row['page']}")
    if conflict is None:
        return _result_item(row, confidence) if confidence < limit else None
    item = _result_item(row, confidence)
    item.kind, item.reason, item.detail, item.conflict = "conflict", CONFLICT_REASON, conflict.detail(), conflict
    return item


def _turned(row: dict[str, Any]) -> Orientation | None:
    """The rotation and skew a record's run applied (None when the row does not say)."""
    if row.get("rotation_applied") is None or row.get("skew_corrected") is None:
        return None
    return Orientation(int(row["rotation_applied"]), round(float(row["skew_corrected"]), 2))


def _failure_item(row: dict[str, Any]) -> ReviewItem:
    """A failure, with the fields of the model's answer when it gave one (kept in `raw_response`)."""
    answer: dict[str, Any] = {}
    try:
        answer = parse_answer(row["raw_response"]) if row["raw_response"] else {}
    except AnswerError:
        pass
    fields = {name: FieldView(None if answer.get(name) is None else str(answer[name]),
                              None if not answer else ("present" if answer.get(name) is not None else "absent"),
                              None) for name in FIELD_NAMES}
    doc_type = answer.get("doc_type") if isinstance(answer.get("doc_type"), str) else None
    return ReviewItem(kind="failure", source_path=row["source_path"], sha256=row["sha256"], page=row["page"],
                      reason=row["reason"], stage=row["stage"], detail=row["detail"], retryable=bool(row["retryable"]),
                      confidence=None, fields=fields, doc_type=doc_type,
                      orientation=answer.get("orientation") if isinstance(answer.get("orientation"), str) else None,
                      checks=[], check_failures=[], file_name=source_file_name(row), run_id=row["run_id"])


def build_queue(out_dir: Path, run_id: str | None = None, *, threshold: float | None = None,
                prepare: PrepareSettings | None = None, thumbnails: bool = True, workers: int = 2,
                whole_out: bool = False, made: RunThumbnails | None = None) -> ReviewQueue:
    """What a person should see, sorted, with thumbnails re-prepared from the sources.

    Of one run (`run_id`, default the latest extract run): its records below the threshold and its failures; a
    failure a later run (a retry) turned into a record below the threshold shows that record, still open. Of the
    whole output folder (`whole_out`): every document's latest record below the threshold and every document still
    failing, whichever run made it (a nightly run skips what earlier runs did, so its own queue cannot show what
    those left for a person). A person's decision settles an item either way. `made`: the thumbnails the run
    made of its pages (the others are re-prepared).
    """
    try:
        summary = run_summary(out_dir, run_id)
    except FileNotFoundError:
        if not whole_out or (summary := latest_run_summary(out_dir)) is None:  # only retries or batch imports
            raise
    run = str(summary["run_id"])
    limit = ReviewSettings().threshold if threshold is None else threshold
    latest = latest_results(out_dir)
    if whole_out:
        records, failures = list(latest.values()), current_failures(out_dir, with_decided=True).to_pylist()
    else:
        own = read_table(out_dir, RESULTS, run_id=run)
        own_failures = read_table(out_dir, FAILURES, run_id=run)
        records = own.to_pylist() if own is not None else []
        failures = own_failures.to_pylist() if own_failures is not None else []
    confidences = [record_confidence(row) for row in records]
    conflicts = find_conflicts(out_dir)
    items = [item for row in records if (item := _record_item(row, limit, conflicts)) is not None]
    listed = {i.key for i in items}
    for partner in _partners(items, conflicts, latest, listed):  # a run's page shows both sides of a conflict
        items.append(partner)
        listed.add(partner.key)
    for row in failures:
        item = _failure_item(row)
        later = latest.get(item.key or "")
        if later is not None and later["processed_at"] < row["failed_at"]:
            later = None  # a result from before the failure (a forced re-run failed it) settles nothing
        if later is not None and item.key not in listed and (record := _record_item(later, limit, conflicts)):
            item = record  # settled by a machine only if it would be auto-accepted
        elif later is not None:
            item.resolved_by_run = later["run_id"]
        if item.key is None or item.key not in listed:
            items.append(item)
            listed.add(item.key)
    corrections = latest_corrections(out_dir)
    for item in items:
        item.correction = corrections.get(item.key or "")
    items.sort(key=lambda i: i.rank)

    if thumbnails:
        own = run_input_dir(summary, out_dir)
        folders = [*([own] if own else []), *input_dirs(out_dir).values()]
        settings = prepare or PrepareSettings()
        pictured = items[:MAX_PICTURES]  # re-preparing costs ~0.3-2 s a page: a page for people, not an export
        for item in pictured:
            item.thumbnail = (made.get(item.key) if made is not None and item.kind != "failure" else None) \
                or item.thumbnail
        again = [item for item in pictured if item.thumbnail.data_uri is None]
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for item, thumb in zip(again, pool.map(lambda i: _thumbnail(i, folders, settings), again), strict=True):
                item.thumbnail = thumb
        for item in items[MAX_PICTURES:]:
            item.thumbnail = Thumbnail(None, f"no picture: only the first {MAX_PICTURES} documents are pictured")
    return ReviewQueue(out_dir=out_dir, run_id=run, threshold=limit, summary=summary, items=items,
                       results=len(confidences), confidences=confidences, whole_out=whole_out)


def _partners(items: list[ReviewItem], conflicts: dict[str, Conflict], latest: dict[str, dict[str, Any]],
              listed: set[str | None]) -> list[ReviewItem]:
    """The flagged machine records that listed records conflict with and that are not listed yet (made by other
    runs)."""
    partners: dict[str, ReviewItem] = {}
    for item in items:
        for disagreement in item.conflict.disagreements if item.conflict else ():
            key = disagreement.other.key
            if key in conflicts and key in latest and key not in listed and key not in partners:
                partners[key] = _record_item(latest[key], 0.0, conflicts)  # type: ignore[assignment]
    return list(partners.values())


def _thumbnail(item: ReviewItem, folders: list[Path], settings: PrepareSettings) -> Thumbnail:
    if item.reason == Reason.PREPARE_CRASHED:  # preparing it again here could take this process down with it
        return Thumbnail(None, "preparing this page crashed the process that tried: no picture")
    path, why_not = locate(item.file_name or item.source_path, item.sha256, folders)
    if path is None or item.sha256 is None:
        return Thumbnail(None, why_not or "the file could not be hashed: no picture")
    return thumbnail(path, item.file_name or item.source_path, item.sha256, item.page or 0, settings, item.turned)
