"""What the review queue lists: one run's documents, or what every run in OUT left for a person."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.datamodel import FIELD_NAMES, Reason
from pipeline.ingest.discover import sha256_file
from pipeline.review.corrections import Correction, not_to_read_again, write_corrections
from pipeline.review.queue import build_queue
from pipeline.store.parquet import RESULT_SCHEMA, RESULTS, write_part, write_run_summary
from tests.unit.test_failure_queue import fail


def _result(out: Path, inbox: Path, name: str, run_id: str, confidence: float, at: datetime) -> None:
    row = {f.name: None for f in RESULT_SCHEMA} | {
        "source_path": name, "page": 0, "sha256": sha256_file(inbox / name), "doc_type": "passport",
        "name": "A B", "id_number": "X1234567", "expiry_long_term": False, "fingerprint": "f", "run_id": run_id,
        "processed_at": at, "backend": "ocr", "model": "m"}
    for field in FIELD_NAMES:
        row[f"{field}_state"], row[f"{field}_confidence"] = "present", confidence
    write_part(out, RESULTS, RESULT_SCHEMA, [row], run_id=run_id, run_date=at.date(), part=ord(name[0]))


def _out(tmp_path: Path) -> tuple[Path, Path]:
    """Run r1 read a (0.5: needs a person), b (0.99) and failed c (endpoint down); a retry r3 then read c at 0.6;
    the nightly run r2 read only a new file d (0.99), skipping the rest as done."""
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    now = datetime.now(timezone.utc)  # the failure below is stamped with the clock: the retry's result comes after
    for i, name in enumerate("abcd"):
        Image.fromarray(np.full((64, 64, 3), 40 * i, np.uint8)).save(inbox / f"{name}.png")
    _result(out, inbox, "a.png", "r1", 0.5, now)
    _result(out, inbox, "b.png", "r1", 0.99, now)
    fail("r1", inbox, "c.png", Reason.ENDPOINT_UNAVAILABLE, out)
    write_run_summary(out, {"run_id": "r1", "input_dir": str(inbox), "accounted": True})
    _result(out, inbox, "c.png", "r3", 0.6, now + timedelta(minutes=5))
    write_run_summary(out, {"run_id": "r3", "accounted": True})  # a retry: no input folder
    _result(out, inbox, "d.png", "r2", 0.99, now + timedelta(minutes=10))
    write_run_summary(out, {"run_id": "r2", "input_dir": str(inbox), "accounted": True})
    return inbox, out


def _open(out: Path, **kw) -> dict[str, str]:
    queue = build_queue(out, threshold=0.95, thumbnails=False, **kw)
    return {i.source_path: i.kind for i in queue.open_items}


def test_a_retry_that_reads_a_failure_below_the_threshold_leaves_it_for_a_person(tmp_path: Path) -> None:
    """Run r1's page: c's failure was resolved by the retry, but at 0.6; it is shown as that record, still open
    (it used to be marked settled: 'a later run produced a record')."""
    _, out = _out(tmp_path)
    assert _open(out, run_id="r1") == {"a.png": "low_confidence", "c.png": "low_confidence"}


def test_the_whole_folder_shows_what_earlier_runs_left_open(tmp_path: Path) -> None:
    """The latest extract run r2 read only d: its own page has nothing open; the folder's page still shows a and
    c until a person decides (a nightly run must not hide what earlier runs left)."""
    inbox, out = _out(tmp_path)
    assert _open(out) == {}
    assert _open(out, whole_out=True) == {"a.png": "low_confidence", "c.png": "low_confidence"}
    values = {"doc_type": "passport", "name": "A B", "id_number": "X1234567", "expiry_date": None}
    write_corrections(out, [Correction(sha256_file(inbox / "a.png"), 0, "a.png", "r1", "Ada", "confirmed",
                                       values, values)])
    assert _open(out, whole_out=True) == {"c.png": "low_confidence"}


def test_a_document_a_person_decided_is_not_read_again(tmp_path: Path) -> None:
    """A failure a person filled in is final: the next run skips it as done (it used to be extracted, and paid
    for, again on every run)."""
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    Image.fromarray(np.full((64, 64, 3), 9, np.uint8)).save(inbox / "e.png")
    fail("r1", inbox, "e.png", Reason.CHECKSUM_FAILED, out)
    key = f"{sha256_file(inbox / 'e.png')}:0"
    assert key not in not_to_read_again(out, "f")
    values = {"doc_type": "passport", "name": "A B", "id_number": "X1234567", "expiry_date": None}
    write_corrections(out, [Correction(key[:64], 0, "e.png", "r1", "Ada", "corrected", values, values)])
    assert key in not_to_read_again(out, "f")


def test_a_decided_failure_leaves_the_queue_even_without_a_page(tmp_path: Path) -> None:
    """A file that could not be opened fails without a page; the review page keys it as page 0, and so does a
    person's decision: the queue `idflow show` prints and the retry both leave it (the retry used to call it
    'for a person' again, and show listed it as still failing)."""
    from pipeline.datamodel import Failure
    from pipeline.review.failure_queue import current_failures, open_entries
    from pipeline.store.parquet import FAILURE_SCHEMA, FAILURES, failure_row

    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    (inbox / "broken.jpg").write_bytes(b"not an image")
    sha = sha256_file(inbox / "broken.jpg")
    row = failure_row(Failure("broken.jpg", sha, None, "ingest", Reason.UNSUPPORTED_TYPE, "text"), fingerprint="f",
                      run_id="r1")
    write_part(out, FAILURES, FAILURE_SCHEMA, [row], run_id="r1", run_date=row["failed_at"].date(), part=0)
    assert [e.source_path for e in open_entries(out)[0]] == ["broken.jpg"] and current_failures(out).num_rows == 1
    nothing = dict.fromkeys(("doc_type", "name", "id_number", "expiry_date"))
    write_corrections(out, [Correction(sha, 0, "broken.jpg", "r1", "Ada", "cannot be read", nothing, nothing)])
    assert open_entries(out)[0] == [] and current_failures(out).num_rows == 0


def test_a_page_that_crashed_its_preparation_is_not_prepared_again_for_its_picture(tmp_path: Path) -> None:
    # The file itself decodes fine here; what matters is that the review never decodes a `prepare_crashed` page.
    inbox, out = _out(tmp_path)
    fail("r4", inbox, "d.png", Reason.PREPARE_CRASHED, out)
    fail("r4", inbox, "a.png", Reason.DECODE_ERROR, out)
    write_run_summary(out, {"run_id": "r4", "input_dir": str(inbox), "accounted": True})
    items = {i.source_path: i for i in build_queue(out, run_id="r4", threshold=0.95).items}
    crashed, other = items["d.png"].thumbnail, items["a.png"].thumbnail
    assert crashed.data_uri is None and "crashed the process" in crashed.note
    assert other.data_uri is not None  # a page of any other failure still gets its picture
