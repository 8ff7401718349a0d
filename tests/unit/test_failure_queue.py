"""The failure queue as current state and work list (plain functions, no Prefect): one row per failing
document with its attempts, which entries are retried, and resolutions recorded without deleting anything."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import Extraction, Failure, PreparedImage, Reason
from pipeline.ingest.discover import sha256_file
from pipeline.ops.retry import retry_failures
from pipeline.review.failure_queue import current_failures, input_dirs, locate, open_entries, read_resolutions
from pipeline.settings import Settings
from pipeline.store.parquet import (
    FAILURE_SCHEMA,
    FAILURES,
    RESULT_SCHEMA,
    RESULTS,
    failure_row,
    read_table,
    run_input_dir,
    write_part,
    write_run_summary,
)

FIELDS = {"doc_type": "passport", "name": "TEST PERSON", "id_number": None, "expiry_date": "2031-01-01",
          "orientation": "landscape"}


class FakeBackend:
    """Answers every page with valid fields, a request failure when `down`, or raises (a bug) when `internal`."""

    def __init__(self, down: bool = False, internal: bool = False) -> None:
        self.name, self.down, self.internal, self.calls = "ocr", down, internal, 0

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        self.calls += len(batch)
        if self.internal:
            raise RuntimeError("a bug in a backend")
        if self.down:
            return [Failure.for_ref(p.ref, "request", Reason.ENDPOINT_UNAVAILABLE, "connection refused",
                                    backend=self.name) for p in batch]
        return [Extraction(ref=p.ref, fields=dict(FIELDS), backend=self.name, model="fake") for p in batch]

    async def aclose(self) -> None:
        pass


@pytest.fixture
def queue(tmp_path: Path) -> tuple[Path, Path]:
    """An upload folder with two images and an OUT whose run `r1` failed both (one retryable, one not)."""
    inbox, out = tmp_path / "in" / "batch-1", tmp_path / "out"
    inbox.mkdir(parents=True)
    for name, shade in (("a.png", 40), ("b.png", 200)):
        Image.fromarray(np.full((320, 480, 3), shade, np.uint8)).save(inbox / name)
    fail("r1", inbox, "a.png", Reason.ENDPOINT_UNAVAILABLE, out)
    fail("r1", inbox, "b.png", Reason.CHECKSUM_FAILED, out)
    write_run_summary(out, {"run_id": "r1", "input_dir": str(inbox), "accounted": True})
    return inbox, out


def fail(run_id: str, inbox: Path, name: str, reason: Reason, out: Path, backend: str = "ocr") -> None:
    failure = Failure(name, sha256_file(inbox / name), 0, "request", reason, "detail", backend=backend)
    row = failure_row(failure, fingerprint="f", run_id=run_id)
    write_part(out, FAILURES, FAILURE_SCHEMA, [row], run_id=run_id, run_date=row["failed_at"].date(),
               part=len(list((out / FAILURES).rglob(f"part-{run_id}-*"))))


def retry(out: Path, backend: FakeBackend, run_id: str, **kw) -> object:
    return asyncio.run(retry_failures(out, Settings(backend="ocr"), run_id=run_id, backend=backend, **kw))


def test_open_entries_group_by_document_and_locate_the_file(queue: tuple[Path, Path]) -> None:
    inbox, out = queue
    entries, done = open_entries(out)
    assert done == []
    by_path = {e.source_path: e for e in entries}
    assert by_path["a.png"].retryable and by_path["a.png"].attempts == 1
    assert locate(by_path["a.png"], input_dirs(out)) == inbox / "a.png"
    assert not by_path["b.png"].retryable


def test_retry_resolves_retryable_entries_and_keeps_every_row(queue: tuple[Path, Path]) -> None:
    _, out = queue
    backend = FakeBackend()
    report = retry(out, backend, "r2")
    assert backend.calls == 1  # only the retryable one
    assert report.resolved == 1 and not report.still_failing
    res = read_resolutions(out).to_pylist()
    assert [(r["run_id"], r["how"], r["page"]) for r in res] == [("r2", "retried", 0)]
    assert read_table(out, RESULTS, run_id="r2").num_rows == 1
    assert read_table(out, FAILURES).num_rows == 2  # nothing deleted
    assert [e.source_path for e in open_entries(out)[0]] == ["b.png"]
    again = FakeBackend()
    assert retry(out, again, "r3").resolved == 0 and again.calls == 0


def test_attempts_are_capped(queue: tuple[Path, Path]) -> None:
    _, out = queue
    down = FakeBackend(down=True)
    report = retry(out, down, "r2", max_attempts=2)
    assert report.still_failing == {"endpoint_unavailable": 1} and down.calls == 1
    (entry,) = [e for e in open_entries(out)[0] if e.retryable]
    assert entry.attempts == 2
    later = FakeBackend()
    report = retry(out, later, "r3", max_attempts=2)
    assert report.exhausted == 1 and later.calls == 0


def test_changed_or_missing_source_is_not_retried(queue: tuple[Path, Path]) -> None:
    inbox, out = queue
    (inbox / "a.png").write_bytes(b"different bytes now")
    backend = FakeBackend()
    assert retry(out, backend, "r2").missing == 1 and backend.calls == 0


def test_result_from_a_later_run_resolves_the_entry(queue: tuple[Path, Path]) -> None:
    inbox, out = queue
    row = {"source_path": "a.png", "page": 0, "sha256": sha256_file(inbox / "a.png"), "fingerprint": "f",
           "run_id": "r9", "processed_at": datetime.now(timezone.utc)}
    write_part(out, RESULTS, RESULT_SCHEMA, [row], run_id="r9", run_date=row["processed_at"].date(), part=0)
    backend = FakeBackend()
    report = retry(out, backend, "r2")
    assert report.resolved_elsewhere == 1 and backend.calls == 0
    assert [(r["run_id"], r["how"]) for r in read_resolutions(out).to_pylist()] == [("r9", "result_exists")]


def test_entries_of_any_backend_are_retried_with_the_one_asked_for(tmp_path: Path) -> None:
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    for name, shade in (("a.png", 0), ("b.png", 90), ("c.png", 180)):
        Image.fromarray(np.full((320, 480, 3), shade, np.uint8)).save(inbox / name)
    fail("r1", inbox, "a.png", Reason.TIMEOUT, out, backend="openai")
    fail("r1", inbox, "b.png", Reason.SERVER_ERROR, out, backend="hybrid")
    fail("r1", inbox, "c.png", Reason.ENDPOINT_UNAVAILABLE, out, backend="batch")
    write_run_summary(out, {"run_id": "r1", "input_dir": str(inbox), "accounted": True})
    backend = FakeBackend()
    report = retry(out, backend, "r2")
    assert report.resolved == 3 and backend.calls == 3
    assert set(read_table(out, RESULTS, ["backend"]).column("backend").to_pylist()) == {"ocr"}
    assert current_failures(out).num_rows == 0


def test_internal_errors_get_one_more_attempt(tmp_path: Path) -> None:
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    Image.fromarray(np.zeros((320, 480, 3), np.uint8)).save(inbox / "a.png")
    fail("r1", inbox, "a.png", Reason.INTERNAL_ERROR, out)
    write_run_summary(out, {"run_id": "r1", "input_dir": str(inbox), "accounted": True})
    broken = FakeBackend(internal=True)
    assert retry(out, broken, "r2").still_failing == {"internal_error": 1} and broken.calls == 1
    again = FakeBackend()
    report = retry(out, again, "r3")
    assert report.exhausted == 1 and again.calls == 0  # 2 attempts in total, then a person
    (row,) = current_failures(out).to_pylist()
    assert (row["reason"], row["attempts"]) == ("internal_error", 2)


def test_a_document_failing_on_three_runs_is_one_entry_with_three_attempts(queue: tuple[Path, Path]) -> None:
    inbox, out = queue
    for run in ("r2", "r3"):
        fail(run, inbox, "b.png", Reason.CHECKSUM_FAILED, out)
    rows = {r["source_path"]: r for r in current_failures(out).to_pylist()}
    assert set(rows) == {"a.png", "b.png"}
    assert rows["b.png"]["attempts"] == 3 and rows["b.png"]["run_ids"] == ["r1", "r2", "r3"]
    assert rows["b.png"]["run_id"] == "r3" and rows["b.png"]["first_failed_at"] < rows["b.png"]["failed_at"]
    assert rows["a.png"]["attempts"] == 1
    assert read_table(out, FAILURES).num_rows == 4  # the history keeps every attempt


def test_a_later_result_closes_an_entry_and_a_later_failure_reopens_it(queue: tuple[Path, Path]) -> None:
    inbox, out = queue
    assert retry(out, FakeBackend(), "r2").resolved == 1
    assert {r["source_path"] for r in current_failures(out).to_pylist()} == {"b.png"}
    fail("r3", inbox, "a.png", Reason.TIMEOUT, out)  # e.g. a forced run with other settings failed it again
    (row,) = [r for r in current_failures(out).to_pylist() if r["source_path"] == "a.png"]
    assert row["attempts"] == 2 and row["run_id"] == "r3"


def test_unhashed_ingest_failures_are_kept_by_path(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for run in ("r1", "r2"):
        failure = Failure("locked.png", None, None, "ingest", Reason.UNREADABLE, "cannot read file")
        row = failure_row(failure, fingerprint="f", run_id=run)
        write_part(out, FAILURES, FAILURE_SCHEMA, [row], run_id=run, run_date=row["failed_at"].date(), part=0)
    (row,) = current_failures(out).to_pylist()
    assert (row["source_path"], row["attempts"], row["sha256"]) == ("locked.png", 2, None)
    report = retry(out, FakeBackend(), "r3")
    assert report.for_a_person == 1


def test_each_extractor_holds_one_request_slot(queue: tuple[Path, Path]) -> None:
    _, out = queue
    held: list[str] = []

    @asynccontextmanager
    async def slot():
        held.append("taken")
        yield
        held.append("released")

    backend = FakeBackend()
    retry(out, backend, "r2", slot=slot)
    assert backend.calls == 1
    assert held.count("taken") == held.count("released") == Settings().concurrency


def test_retry_run_writes_a_summary_without_an_input_folder(queue: tuple[Path, Path]) -> None:
    """Retry runs span many folders: their summary must not make `nightly` think a folder is done."""
    from pipeline.ingest.inbox import folders_done_by_runs

    inbox, out = queue
    retry(out, FakeBackend(), "r2")
    assert set(folders_done_by_runs(out)) == {str(inbox.resolve())}


def test_an_older_summary_with_its_folder_in_full_is_still_read(tmp_path: Path) -> None:
    """A summary written before OUT's sources file kept the exact folder: its own `input_dir` is the folder."""
    folder = tmp_path / "in"
    summary = {"run_id": "old", "input_dir": str(folder), "input_dir_hex": bytes(str(folder), "utf-8").hex()}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "old.json").write_text(json.dumps(summary))
    assert run_input_dir(summary, tmp_path) == folder and input_dirs(tmp_path) == {"old": folder}
