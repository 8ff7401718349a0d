"""Finding a reviewed document's source again: odd names must give a picture or a reason, never an exception."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import os
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Extraction, FieldReading, PreparedImage, Record
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import Orientation, encode, prepare_page
from pipeline.review.queue import _failure_item, _result_item
from pipeline.review.thumbnails import THUMBNAIL_LONG_EDGE, RunThumbnails, locate, thumbnail
from pipeline.settings import PrepareSettings
from pipeline.store.parquet import path_bytes, readable_path


def test_a_path_too_long_to_open_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    # ENAMETOOLONG is not one of the errors pathlib's is_file() swallows: the review step used to end the run
    path, why_not = locate("d" * 300 + "/x.jpg", "0" * 64, [tmp_path])
    assert path is None and "cannot be opened" in why_not


def test_a_name_that_is_not_utf8_is_found_by_its_bytes(tmp_path: Path) -> None:
    name = os.fsdecode(b"scan-\xff\xfe.jpg")
    (tmp_path / name).write_bytes(b"pixels")
    digest = hashlib.sha256(b"pixels").hexdigest()
    row = {"source_path": readable_path(name), "source_path_bytes": path_bytes(name), "sha256": digest, "page": 0,
           "reason": "decode_error", "stage": "preprocess", "detail": "x", "retryable": False, "raw_response": None,
           "run_id": "r1"}
    item = _failure_item(row)
    assert item.source_path == "scan-\\xff\\xfe.jpg"  # readable text, for people
    assert locate(item.source_path, digest, [tmp_path])[0] is None
    assert locate(item.file_name, digest, [tmp_path])[0] == tmp_path / name


def test_a_thumbnail_shows_the_page_turned_as_the_run_turned_it(tmp_path: Path, sample_dir: Path) -> None:
    """Sideways source, upright picture no larger than the thumbnail size, as `prepare_page` turns the page."""
    sideways = tmp_path / "sideways.jpg"
    Image.open(sample_dir / "id_card_td1.jpg").transpose(Image.Transpose.ROTATE_90).save(sideways, quality=95)
    digest = sha256_file(sideways)
    prepared = prepare_page(DocumentRef(sideways, sideways.name, digest), PrepareSettings(), keep_full=False)
    picture = thumbnail(sideways, sideways.name, digest, 0, PrepareSettings())
    header, data = picture.data_uri.split(",", 1)
    shown = Image.open(io.BytesIO(base64.b64decode(data)))
    assert header == "data:image/jpeg;base64" and prepared.rotation_applied == 90
    assert shown.width > shown.height and max(shown.size) <= THUMBNAIL_LONG_EDGE


def test_a_records_picture_is_turned_as_its_run_turned_it_not_looked_at_again(sample_dir: Path) -> None:
    """A record carries the rotation and skew its run applied (the OCR's upside-down reading included), and its
    picture is turned by those: an upright card stored as turned 90 degrees comes out portrait, where finding its
    orientation again would leave it landscape."""
    source = sample_dir / "id_card_td1.jpg"
    digest = sha256_file(source)
    row = {"source_path": source.name, "sha256": digest, "page": 0, "run_id": "r1", "doc_type": "id_card",
           "orientation": "landscape", "checks": [], "check_failures": [], "expiry_long_term": False,
           "rotation_applied": 90, "skew_corrected": 0.0,
           **{name: None for name in FIELD_NAMES}, **{f"{name}_state": "unreadable" for name in FIELD_NAMES},
           **{f"{name}_confidence": None for name in FIELD_NAMES}}
    item = _result_item(row, 0.0)
    assert item.turned == Orientation(90, 0.0)

    def shown(turned: Orientation | None) -> Image.Image:
        picture = thumbnail(source, source.name, digest, 0, PrepareSettings(), turned)
        return Image.open(io.BytesIO(base64.b64decode(picture.data_uri.split(",", 1)[1])))

    as_stored, found_again = shown(item.turned), shown(None)
    assert as_stored.height > as_stored.width and found_again.width > found_again.height


def _record(name: str, confidence: float | None) -> Record:
    ref = DocumentRef(Path(name), name, hashlib.sha256(name.encode()).hexdigest())
    states = {field: FieldReading("x", "present", confidence) for field in FIELD_NAMES}
    pixels = np.full((640, 1024, 3), 200, np.uint8)
    prepared = PreparedImage(ref=ref, pixels=pixels, original_size=(1024, 640), sent_size=(1024, 640),
                             rotation_applied=0, skew_corrected=0.0, orientation="landscape", visual_tokens=640)
    return Record(Extraction(ref=ref, fields={}, backend="openai", model="m", field_states=states), prepared, [],
                  None, False)


def test_a_run_keeps_the_pictures_of_the_records_its_review_page_lists_first() -> None:
    """The least confident records (then by path, as the page sorts them), at most `limit`, whatever the order
    they come in; a kept picture is the page sent, shrunk to the thumbnail size."""
    made = RunThumbnails(limit=3)
    records = [_record("e.jpg", 0.9), _record("a.jpg", None), _record("d.jpg", 0.2), _record("c.jpg", 0.0),
               _record("b.jpg", 0.99)]
    for record in records:
        made.keep(record, record.prepared)
    kept = {r.extraction.ref.rel_path for r in records if made.get(r.extraction.ref.key) is not None}
    assert kept == {"a.jpg", "c.jpg", "d.jpg"}  # None counts as 0, then a.jpg before c.jpg
    assert not made.wanted(_record("z.jpg", 0.5)) and made.wanted(_record("b0.jpg", 0.0))
    picture = made.get(records[1].extraction.ref.key)
    shown = Image.open(io.BytesIO(base64.b64decode(picture.data_uri.split(",", 1)[1])))
    assert shown.size == (THUMBNAIL_LONG_EDGE, 300)


def test_an_auto_accepted_record_gets_no_picture_even_with_room_left() -> None:
    """Only what the review page lists is pictured: a record at or above the threshold is not on it."""
    made = RunThumbnails(limit=3, threshold=0.95)
    accepted, flagged = _record("a.jpg", 0.96), _record("b.jpg", 0.94)
    for record in (accepted, flagged):
        made.keep(record, record.prepared)
    assert not made.wanted(accepted) and made.get(accepted.extraction.ref.key) is None
    assert made.get(flagged.extraction.ref.key) is not None


def test_a_page_sent_as_its_jpeg_alone_still_gets_its_picture() -> None:
    """A VLM run keeps only the JPEG it sent (`PreparedImage.sent_jpeg`): the picture is made from it, decoded by
    DCT scaling no smaller than the thumbnail, the same size as from the pixels."""
    from pipeline.review.thumbnails import from_page

    record = _record("a.jpg", 0.1)
    pixels = np.zeros((640, 1024, 3), np.uint8)
    pixels[:, :512] = (200, 30, 30)
    jpeg = encode(pixels, "jpeg", 90)[0]
    sent = dataclasses.replace(record.prepared, pixels=None, sent_jpeg=jpeg)
    both = [Image.open(io.BytesIO(base64.b64decode(from_page(p).data_uri.split(",", 1)[1])))
            for p in (dataclasses.replace(record.prepared, pixels=pixels), sent)]
    assert both[0].size == both[1].size == (THUMBNAIL_LONG_EDGE, 300)
    left, right = (np.asarray(both[1])[150, x].astype(int) for x in (100, 400))
    assert left[0] > 150 and left[1] < 80 and right.max() < 40  # the page's colours, where they were
