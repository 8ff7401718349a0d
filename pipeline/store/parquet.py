"""Parquet outputs: typed results, the failure queue, the idempotency index and per-run summaries.

Layout under OUT/: `results/run_date=YYYY-MM-DD/part-<run_id>-<n>.parquet`, the same for `failures/`, and
`runs/<run_id>.json`. Each part is written under a hidden temp name unique to the writer and renamed, so a crash
never leaves a half-written file that a reader would pick up; a run flushes every `flush_every` documents, so a
killed run loses at most that much work and never duplicates a row. One run writes OUT at a time
(`pipeline.store.output_lock`), and run ids are full UUIDs, so part names never collide.

Any file name is stored: Python hands out names that are not UTF-8 as `str` with surrogate escapes, which
Parquet strings cannot hold. `source_path` is the readable form (undecodable bytes shown as `\\xNN`) and
`source_path_bytes` the exact bytes (`os.fsencode`), from which `source_file_name` gives the name back. A row
that still cannot be converted costs that one document (it becomes an `internal_error` failure), never the part.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.datamodel import FIELD_NAMES, Failure, Reason, Record, Skipped
from pipeline.masking import redact
from pipeline.store.atomic import write_json_atomic

RESULTS = "results"
FAILURES = "failures"
RUNS = "runs"

_STATE_COLUMNS = [
    f for name in FIELD_NAMES for f in (pa.field(f"{name}_state", pa.string()),
                                        pa.field(f"{name}_confidence", pa.float32()))
]

RESULT_SCHEMA = pa.schema([
    pa.field("source_path", pa.string(), nullable=False),  # readable: undecodable bytes as \xNN
    pa.field("source_path_bytes", pa.binary()),  # exact: os.fsencode(rel path); null in parts written before it
    pa.field("page", pa.int32(), nullable=False),
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("doc_type", pa.string()),
    pa.field("name", pa.string()),
    pa.field("id_number", pa.string()),
    pa.field("expiry_date", pa.date32()),
    pa.field("expiry_long_term", pa.bool_()),
    # the expiry date is before the run's date (its run_date); null: no expiry date read, or valid for life
    pa.field("expired", pa.bool_()),
    # the issuing state or country where the document states it: its zone's issuer code (ISO 3166-1 alpha-3 for a
    # country), CHN for the PRC's cards, a national front's country; null where the page states none
    pa.field("issuer", pa.string()),
    pa.field("orientation", pa.string()),
    pa.field("rotation_applied", pa.int16()),
    pa.field("skew_corrected", pa.float32()),
    pa.field("orientation_confidence", pa.float32()),
    pa.field("original_width", pa.int32()),
    pa.field("original_height", pa.int32()),
    pa.field("sent_width", pa.int32()),
    pa.field("sent_height", pa.int32()),
    pa.field("visual_tokens", pa.int32()),
    pa.field("backend", pa.string()),
    pa.field("model", pa.string()),
    pa.field("endpoint", pa.string()),
    pa.field("prompt_tokens", pa.int32()),
    pa.field("completion_tokens", pa.int32()),
    pa.field("latency_ms", pa.float32()),
    pa.field("attempts", pa.int16()),
    pa.field("checks", pa.list_(pa.string())),
    pa.field("check_failures", pa.list_(pa.string())),
    *_STATE_COLUMNS,
    # the calibration table that scored the confidences: "backend/model/prompt#hash"; null: no table was fitted
    # for them, so the confidences are unknown (null) and the record goes to a person
    pa.field("calibration", pa.string()),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("processed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("worker", pa.string()),  # Dask worker address, or "local" for the in-process path
])

FAILURE_SCHEMA = pa.schema([
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("source_path_bytes", pa.binary()),
    pa.field("sha256", pa.string()),
    pa.field("page", pa.int32()),
    pa.field("stage", pa.string(), nullable=False),
    pa.field("reason", pa.string(), nullable=False),
    pa.field("retryable", pa.bool_(), nullable=False),
    pa.field("detail", pa.string()),
    pa.field("attempts", pa.int16()),
    pa.field("raw_response", pa.string()),
    pa.field("backend", pa.string()),
    pa.field("fingerprint", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("failed_at", pa.timestamp("us", tz="UTC"), nullable=False),
])

# What a column means where its name does not say it all (docs/reference.md shows these beside the columns).
COLUMN_NOTES: dict[str, str] = {
    "expiry_date": "null: none read, or valid for life (`expiry_long_term`)",
    "expiry_long_term": "the document is valid for life (长期)",
    "expired": "the expiry date is before the run's date (its `run_date`, UTC); null when no expiry date was read "
               "or the document is valid for life",
    "issuer": "the issuing state or country where the document states it: the machine-readable zone's issuer "
              "(ISO 3166-1 alpha-3 for a country, Germany's `D` as DEU; ICAO codes such as UTO, XXA otherwise), "
              "CHN for the PRC's cards (居民身份证, 外国人永久居留身份证), a national card front's country; null "
              "when the page states none",
    "calibration": "the confidence table that scored the confidences; null: none fitted, confidences unknown",
}

RAW_RESPONSE_LIMIT = 2000
# What pyarrow raises for a value that does not fit its column (wrong type, out of range, unencodable text).
_CONVERSION_ERRORS = (pa.ArrowException, ValueError, TypeError, OverflowError)


class OutputUnreadable(RuntimeError):
    """A part of OUT's results or failures cannot be read, so what is already done cannot be known."""


class StoreWriteError(OSError):
    """A part could not be written (disk full, permissions). Parts written before stay; the rows of the failed
    part stay buffered in the writer, and the documents they hold are redone by the next run. `errno` is the
    system's (ENOSPC: disk full), `filename` the part."""

    def __init__(self, message: str, *, cause: OSError, path: Path) -> None:
        super().__init__(message)
        self.message = message
        self.errno, self.strerror, self.filename = cause.errno, cause.strerror, str(path)

    def __str__(self) -> str:
        return self.message


def _now() -> datetime:
    return datetime.now(timezone.utc)


def path_bytes(rel_path: str) -> bytes:
    """The file name's exact bytes (what the file system has), from the str Python gave for it."""
    try:
        return os.fsencode(rel_path)
    except UnicodeEncodeError:  # a lone surrogate that no file system produced: keep it anyway
        return rel_path.encode("utf-8", "surrogatepass")


def readable_path(rel_path: str) -> str:
    """The name as valid UTF-8 text for people and Parquet strings: bytes that are not UTF-8 become `\\xNN`."""
    return path_bytes(rel_path).decode("utf-8", "backslashreplace")


def source_file_name(row: dict[str, Any]) -> str:
    """The relative path as the file system knows it, from a stored row (the exact bytes when stored)."""
    raw = row.get("source_path_bytes")
    return os.fsdecode(raw) if raw is not None else row["source_path"]


def _text(value: Any) -> Any:
    """Any string made storable: unencodable characters (lone surrogates in names echoed by error messages)
    become escapes; other values pass through."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    elif isinstance(value, list):
        return [_text(v) for v in value]
    return value


def _storable(row: dict[str, Any]) -> dict[str, Any]:
    return {k: _text(v) for k, v in row.items()}


def expired(record: Record, run_date: date) -> bool | None:
    """Whether the document had expired on the run's date: its expiry date is before it. None (unknown, not "no")
    when no expiry date was read or the document is valid for life (长期)."""
    if record.expiry_long_term or not record.expiry_date:
        return None
    return date.fromisoformat(record.expiry_date) < run_date


def result_row(record: Record, *, fingerprint: str, run_id: str, worker: str = "local",
               run_date: date | None = None) -> dict[str, Any]:
    """Flatten a Record into one results row (drops the pixels, keeps everything the table promises); `expired`
    is judged on `run_date` (default: today, UTC, as the run's partition)."""
    ex, prep = record.extraction, record.prepared
    row: dict[str, Any] = {
        "source_path": readable_path(ex.ref.rel_path),
        "source_path_bytes": path_bytes(ex.ref.rel_path),
        "page": ex.ref.page,
        "sha256": ex.ref.sha256,
        "doc_type": ex.fields.get("doc_type"),
        "name": ex.fields.get("name"),
        "id_number": ex.fields.get("id_number"),
        "expiry_date": date.fromisoformat(record.expiry_date) if record.expiry_date else None,
        "expiry_long_term": record.expiry_long_term,
        "expired": expired(record, run_date or _now().date()),
        "issuer": ex.issuer,
        "orientation": ex.fields.get("orientation") or prep.orientation,
        "rotation_applied": (prep.rotation_applied + ex.rotation_correction) % 360,
        "skew_corrected": prep.skew_corrected,
        "orientation_confidence": prep.orientation_confidence,
        "original_width": prep.original_size[0],
        "original_height": prep.original_size[1],
        "sent_width": prep.sent_size[0],
        "sent_height": prep.sent_size[1],
        "visual_tokens": prep.visual_tokens,
        "backend": ex.backend,
        "model": ex.model,
        "endpoint": ex.endpoint,
        "prompt_tokens": ex.prompt_tokens,
        "completion_tokens": ex.completion_tokens,
        "latency_ms": ex.latency_ms,
        "attempts": ex.attempts,
        "checks": record.checks,
        "check_failures": list(ex.check_failures),
        "calibration": ex.calibration,
        "fingerprint": fingerprint,
        "run_id": run_id,
        "processed_at": _now(),
        "worker": worker,
    }
    for name in FIELD_NAMES:
        reading = ex.field_states.get(name)
        row[f"{name}_state"] = reading.state if reading else ("absent" if ex.fields.get(name) is None else "present")
        row[f"{name}_confidence"] = reading.confidence if reading else None
    return _storable(row)


def failure_row(failure: Failure, *, fingerprint: str, run_id: str) -> dict[str, Any]:
    return _storable({
        "source_path": readable_path(failure.rel_path),
        "source_path_bytes": path_bytes(failure.rel_path),
        "sha256": failure.sha256,
        "page": failure.page,
        "stage": failure.stage,
        "reason": str(failure.reason),
        "retryable": failure.retryable,
        "detail": redact(failure.detail),
        "attempts": failure.attempts,
        "raw_response": (failure.raw_response or None) and failure.raw_response[:RAW_RESPONSE_LIMIT],
        "backend": failure.backend,
        "fingerprint": fingerprint,
        "run_id": run_id,
        "failed_at": _now(),
    })


def unstorable(row: dict[str, Any], exc: BaseException, *, what: str) -> Failure:
    """The failure that stands for a document whose row could not be converted (a bug: a value of the wrong
    type or range), so the document is still accounted for and the rest of its part is stored."""
    return Failure(rel_path=source_file_name(row) if row.get("source_path") is not None else "?",
                   sha256=row.get("sha256"), page=row.get("page"), stage="internal", reason=Reason.INTERNAL_ERROR,
                   detail=redact(f"{what} row could not be stored: {type(exc).__name__}: {exc}")[:500],
                   backend=row.get("backend"))


STALE_TEMP_PART_S = 3600.0  # a writer renames its temp part within seconds; an hour-old one was left by a kill
# Tables only the holder of OUT's lock writes: a temp part of theirs that the next holder finds belongs to a run
# that is over, however young it is. Other tables (a person's corrections, saved from the review page without the
# lock) may be being written right now, so only an old temp part of theirs is a leftover.
LOCKED_TABLES = ("results", "failures", "resolutions")


def remove_stale_temp_parts(out_dir: Path, older_than_s: float = STALE_TEMP_PART_S) -> int:
    """Remove the temp files of parts whose writer ended before its rename (killed, or stopped during a flush;
    readers already ignore them); return how many. Called by the new holder of OUT's lock: every temp part of the
    tables written under the lock goes, of the others those older than `older_than_s`."""
    cutoff = datetime.now(timezone.utc).timestamp() - older_than_s
    removed = 0
    for tmp in out_dir.glob("*/run_date=*/.part-*.tmp"):
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to remove: left as it is
            locked = tmp.parent.parent.name in LOCKED_TABLES
            if tmp.is_file() and not tmp.is_symlink() and (locked or tmp.stat().st_mtime < cutoff):
                tmp.unlink()
                removed += 1
    return removed


def write_part(out_dir: Path, table_name: str, schema: pa.Schema, rows: list[dict[str, Any]] | pa.Table, *,
               run_id: str, run_date: date, part: int) -> Path:
    """Write rows as one Parquet file atomically (temp name unique to this call + rename in the same folder);
    on any error the temp file is removed and a `StoreWriteError` names the part."""
    folder = out_dir / table_name / f"run_date={run_date.isoformat()}"
    final = folder / f"part-{run_id}-{part:05d}.parquet"
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
    tmp = folder / f".{final.name}.{uuid.uuid4().hex}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, tmp)
        with tmp.open("rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException as exc:  # a SIGTERM landing mid-write too: no temp part outlives the writer's process
        with contextlib.suppress(OSError):  # the folder may be what failed
            tmp.unlink(missing_ok=True)
        if not isinstance(exc, OSError):
            raise
        raise StoreWriteError(f"could not write {table.num_rows} {table_name} rows to {final}: {exc}", cause=exc,
                              path=final) from exc
    return final


def storable_table(rows: list[dict[str, Any]], schema: pa.Schema, *,
                   what: str) -> tuple[pa.Table, list[tuple[dict[str, Any], Failure]]]:
    """The rows as one table, and (row, failure) for each row that cannot be converted and was left out.

    Converting the whole list is fast; only when that fails is each row tried alone, to find the bad ones."""
    try:
        return pa.Table.from_pylist(rows, schema=schema), []
    except _CONVERSION_ERRORS:
        pass
    good: list[pa.Table] = []
    bad: list[tuple[dict[str, Any], Failure]] = []
    for row in rows:
        try:
            good.append(pa.Table.from_pylist([row], schema=schema))
        except _CONVERSION_ERRORS as exc:
            bad.append((row, unstorable(row, exc, what=what)))
    return (pa.concat_tables(good) if good else schema.empty_table()), bad


@dataclass
class RunWriter:
    """Buffers rows of one run and writes them in atomic parts of at most `flush_every` documents.

    A result whose row cannot be built or converted is stored as an `internal_error` failure instead and listed
    in `demoted` (the run's tally moves it from results to failures). A part that cannot be written raises
    `StoreWriteError` with its rows still buffered; parts already written are never touched again.
    """

    out_dir: Path
    run_id: str
    fingerprint: str
    flush_every: int = 500
    run_date: date = field(default_factory=lambda: _now().date())
    _results: list[dict[str, Any]] = field(default_factory=list)
    _failures: list[dict[str, Any]] = field(default_factory=list)
    _parts: Counter[str] = field(default_factory=Counter)
    written: list[Path] = field(default_factory=list)
    demoted: list[Failure] = field(default_factory=list)
    stored: int = 0  # documents (result and failure rows) in the parts written so far

    def add(self, outcome: Record | Failure | Skipped, *, worker: str = "local") -> None:
        """Buffer one document's row (skips are only counted, never stored)."""
        if isinstance(outcome, Record):
            try:
                self._results.append(result_row(outcome, fingerprint=self.fingerprint, run_id=self.run_id,
                                                worker=worker, run_date=self.run_date))
            except Exception as exc:  # noqa: BLE001 - a bad value costs this document only
                ref = outcome.extraction.ref
                self._demote({"source_path": ref.rel_path, "sha256": ref.sha256, "page": ref.page,
                              "backend": outcome.extraction.backend}, exc)
        elif isinstance(outcome, Failure):
            self._failures.append(failure_row(outcome, fingerprint=self.fingerprint, run_id=self.run_id))
        if len(self._results) + len(self._failures) >= self.flush_every:
            self.flush()

    def _demote(self, row: dict[str, Any], exc: BaseException) -> None:
        failure = unstorable(row, exc, what="result")
        self.demoted.append(failure)
        self._failures.append(failure_row(failure, fingerprint=self.fingerprint, run_id=self.run_id))

    def flush(self) -> None:
        """Write what is buffered: results first, then failures (with any demoted results among them)."""
        if self._results:
            table, bad = storable_table(self._results, RESULT_SCHEMA, what="result")
            if bad:
                left_out = {id(row) for row, _ in bad}
                self._results = [row for row in self._results if id(row) not in left_out]
                for _, failure in bad:
                    self.demoted.append(failure)
                    self._failures.append(failure_row(failure, fingerprint=self.fingerprint, run_id=self.run_id))
            if table.num_rows:
                self._write(RESULTS, RESULT_SCHEMA, table)
            self._results = []
        if self._failures:
            table, bad = storable_table(self._failures, FAILURE_SCHEMA, what="failure")
            if bad:  # a failure row with an odd value: the document keeps a minimal internal_error row
                minimal = [failure_row(f, fingerprint=self.fingerprint, run_id=self.run_id) for _, f in bad]
                table = pa.concat_tables([table, pa.Table.from_pylist(minimal, schema=FAILURE_SCHEMA)])
            self._write(FAILURES, FAILURE_SCHEMA, table)
            self._failures = []

    def _write(self, name: str, schema: pa.Schema, table: pa.Table) -> None:
        self.written.append(write_part(self.out_dir, name, schema, table, run_id=self.run_id,
                                       run_date=self.run_date, part=self._parts[name]))
        self._parts[name] += 1
        self.stored += table.num_rows


def read_dataset(out_dir: Path, table_name: str, schema: pa.Schema, columns: list[str] | None = None,
                 run_id: str | None = None) -> pa.Table | None:
    """One of OUT's partitioned datasets (all runs, or one run) read with its declared schema, or None before its
    first part was written."""
    folder = out_dir / table_name
    if not folder.is_dir() or not any(folder.rglob("*.parquet")):
        return None
    import pyarrow.dataset as ds  # ~1 s (it loads pandas): paid only when there is something to read

    try:
        dataset = ds.dataset(folder, format="parquet", partitioning="hive", schema=schema.append(
            pa.field("run_date", pa.string())))
        return dataset.to_table(columns=columns, filter=None if run_id is None else ds.field("run_id") == run_id)
    except (pa.ArrowException, OSError) as exc:  # parts are written atomically: only damage from outside does this
        raise _unreadable(folder, out_dir, exc) from None


def check_parts(out_dir: Path) -> None:
    """Raise `OutputUnreadable` for the first Parquet part of OUT whose footer cannot be read (a copy cut short).
    A command calls it before it starts a flow, so a damaged OUT is refused in one line instead of failing inside
    the flow (whose engine logs a traceback)."""
    for part in sorted(out_dir.glob("*/run_date=*/part-*.parquet")):
        try:
            pq.read_metadata(part)
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(part.parent.parent, out_dir, exc) from None


def _unreadable(folder: Path, out_dir: Path, exc: BaseException) -> OutputUnreadable:
    return OutputUnreadable(f"{folder} holds a Parquet part that cannot be read ({' '.join(str(exc).split())}): "
                            f"restore that file, or move it out of {out_dir} (the documents of a results or "
                            "failures part are then done again; the decisions of a corrections part are lost), "
                            "and run again")


def read_table(out_dir: Path, table_name: str, columns: list[str] | None = None,
               run_id: str | None = None) -> pa.Table | None:
    """The results or failures dataset (all runs, or one run), or None before the first run wrote one."""
    schema = RESULT_SCHEMA if table_name == RESULTS else FAILURE_SCHEMA
    return read_dataset(out_dir, table_name, schema, columns, run_id)


def done_keys(out_dir: Path, fingerprint: str | None) -> set[str]:
    """Document keys (`sha256:page`) that already have a result made with the same settings (`fingerprint`), or
    made by any run (None)."""
    table = read_table(out_dir, RESULTS, ["sha256", "page", "fingerprint"])
    if table is None:
        return set()
    rows = table.to_pylist()
    return {f"{r['sha256']}:{r['page']}" for r in rows if fingerprint is None or r["fingerprint"] == fingerprint}


def latest_results(out_dir: Path, columns: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """`sha256:page` -> the document's latest result row over all runs (`columns` must include sha256, page and
    processed_at when given)."""
    table = read_table(out_dir, RESULTS, columns)
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(table.to_pylist() if table is not None else [], key=lambda r: r["processed_at"]):
        latest[f"{row['sha256']}:{row['page']}"] = row
    return latest


def write_run_summary(out_dir: Path, summary: dict[str, Any]) -> Path:
    """`runs/<run_id>.json`, with the folders (`input_dir`, `source_dir` for a batch import, `out_dir`) masked
    like every message: a folder's name can hold an ID number. The exact folders (the retry and the review find
    files under them) go to `sources/<run_id>.json`, which holds personal data like the Parquet results; JSON
    text cannot hold a name that is not UTF-8, so each is stored readable and exact (`<key>_hex`)."""
    stored = {k: _text(v) for k, v in summary.items()}
    exact: dict[str, str] = {}
    for key in _FOLDER_KEYS:
        if summary.get(key):
            stored[key] = redact(readable_path(summary[key]))
            exact[key] = readable_path(summary[key])
            exact[f"{key}_hex"] = path_bytes(summary[key]).hex()
    if exact:
        write_json_atomic(out_dir / SOURCES / f"{summary['run_id']}.json", {"run_id": summary["run_id"], **exact})
    return write_json_atomic(out_dir / RUNS / f"{summary['run_id']}.json", stored)


SOURCES = "sources"  # per run, the exact folders it read and wrote: personal data, like the results
_FOLDER_KEYS = ("input_dir", "source_dir", "out_dir")
_INPUT_KEYS = ("input_dir", "source_dir")


def run_input_dir(summary: dict[str, Any], out_dir: Path) -> Path | None:
    """The folder a stored run of `out_dir` read its documents from, exactly as the file system names it (None:
    a retry): from `OUT/sources/<run_id>.json`, else from the summary itself (written before folders were
    masked in it)."""
    try:
        exact = json.loads((out_dir / SOURCES / f"{summary['run_id']}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError):
        exact = summary
    for key in _INPUT_KEYS:
        if exact.get(f"{key}_hex"):
            return Path(os.fsdecode(bytes.fromhex(exact[f"{key}_hex"])))
        if exact.get(key):
            return Path(exact[key])
    return None


def latest_run_summary(out_dir: Path) -> dict[str, Any] | None:
    runs = sorted((out_dir / RUNS).glob("*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(runs[-1].read_text(encoding="utf-8")) if runs else None
