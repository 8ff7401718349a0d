"""Thumbnails of the prepared page (what a model sees): made by the run from the page it sent, or re-prepared from
the source file.

A run keeps the thumbnails of its least confident records (`RunThumbnails`, as many as the review page pictures):
the page it has just sent is already decoded and upright, so a thumbnail costs a resize and a small JPEG, where
re-preparing costs a second decode (a PNG scan cannot be decoded smaller: 30-40 ms a page). Any other item (a
failure, a record of another run, the page of `idflow review`) is re-prepared: its source is found again from the
run summary's input folder and the row's relative path, and used only if its bytes still hash to the row's
sha256: a file that changed since the run would show a different document.
Thumbnails hold personal data, so they live only inside OUT (embedded in the review page), never in Prefect.
"""

from __future__ import annotations

import base64
import heapq
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure, PreparedImage, Record
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import Orientation, cap_long_edge, decode_jpeg, encode, prepare_page
from pipeline.settings import PrepareSettings, ReviewSettings

THUMBNAIL_LONG_EDGE = 480
THUMBNAIL_QUALITY = 80


@dataclass(frozen=True)
class Thumbnail:
    """A `data:` URI of a JPEG no larger than THUMBNAIL_LONG_EDGE, or why there is no picture."""

    data_uri: str | None
    note: str = ""


def locate(source_path: str, sha256: str | None, folders: list[Path]) -> tuple[Path | None, str]:
    """The source file under the first folder that holds it with the same bytes, else None and why not."""
    changed = False
    unopenable = ""
    for folder in dict.fromkeys(folders):
        candidate = Path(folder) / source_path
        try:  # pathlib swallows "not found", not a path too long to open or a folder we may not read
            if candidate.is_file():
                if sha256 is None or sha256_file(candidate) == sha256:
                    return candidate, ""
                changed = True
        except OSError as exc:
            unopenable = exc.strerror or type(exc).__name__
    if changed:
        return None, "the source file has changed since the run (its sha256 differs): no picture"
    if unopenable:
        return None, f"the source file cannot be opened ({unopenable}): no picture"
    return None, "the source file is gone (not found under the run's input folder): no picture"


def thumbnail(path: Path, source_path: str, sha256: str, page: int, settings: PrepareSettings,
              turned: Orientation | None = None) -> Thumbnail:
    """Prepare the page as a VLM run does, but sent at the thumbnail's size: decoded no larger than that and
    turned upright there, with no full-size copy for the OCR. A record's page is turned as its run turned it
    (`turned`: the rotation and skew stored with it, the OCR's upside-down reading included); a failed page's
    orientation is found again, on a 500 px copy as in a run. CPU a picture, mean over the generated set: 73 ms
    (full prepare), 48 (as sent to a VLM), 34 (at its own size; 24 once resizing got cheaper), 10 (a record's,
    turned as stored)."""
    small = settings.model_copy(update={"max_long_edge": min(settings.max_long_edge, THUMBNAIL_LONG_EDGE)})
    prepared = prepare_page(DocumentRef(path=path, rel_path=source_path, sha256=sha256, page=page), small,
                            keep_full=False, orientation=turned)
    if isinstance(prepared, Failure):
        return Thumbnail(None, f"the page cannot be prepared ({prepared.reason}): no picture")
    jpeg, mime = encode(cap_long_edge(prepared.pixels, THUMBNAIL_LONG_EDGE), "jpeg", THUMBNAIL_QUALITY)
    return Thumbnail(f"data:{mime};base64," + base64.b64encode(jpeg).decode("ascii"))


def from_page(page: PreparedImage) -> Thumbnail:
    """The thumbnail of a prepared page: from its pixels (RGB, upright), or where the backend kept only the JPEG it
    sent (`PreparedImage.sent_jpeg`), from that, decoded by DCT scaling no smaller than the thumbnail."""
    pixels = page.pixels if page.pixels is not None else _decoded_small(page.sent_jpeg or b"", max(page.sent_size))
    jpeg, mime = encode(cap_long_edge(pixels, THUMBNAIL_LONG_EDGE), "jpeg", THUMBNAIL_QUALITY)
    return Thumbnail(f"data:{mime};base64," + base64.b64encode(jpeg).decode("ascii"))


def _decoded_small(jpeg: bytes, long_edge: int) -> np.ndarray:
    """A JPEG decoded at 1/8, 1/4 or 1/2 of its size, the smallest still at least THUMBNAIL_LONG_EDGE long (RGB)."""
    return decode_jpeg(jpeg, next((k for k in (8, 4, 2) if long_edge // k >= THUMBNAIL_LONG_EDGE), 1))


def rank_of(record: Record) -> tuple[float, str, int]:
    """Where the review page lists `record` among the run's records (`ReviewItem.rank` of a record): its least
    field confidence as stored (float32; a field without one counts as 0), then its path and page."""
    states = record.extraction.field_states
    confidence = min(0.0 if (r := states.get(name)) is None or r.confidence is None
                     else float(np.float32(r.confidence)) for name in FIELD_NAMES)
    ref = record.extraction.ref
    return confidence, ref.rel_path, ref.page


class RunThumbnails:
    """The thumbnails of the `limit` records of a run listed first on its review page (least confident first),
    made from the pages the run prepared; the review page re-prepares whatever is not here. Thread-safe.

    A record at or above the review `threshold` is auto-accepted and not on the page, so it gets no picture (most
    of a run's records: making theirs cost a decode, a resize and a JPEG each for nothing). The rare accepted record
    the page still lists, for its number's conflict with another record, is re-prepared there."""

    def __init__(self, limit: int, threshold: float | None = None) -> None:
        self.limit = limit
        self.threshold = ReviewSettings().threshold if threshold is None else threshold
        self._kept: list[tuple[tuple[float, str, int], str]] = []  # max-heap by rank (negated), of keys
        self._pictures: dict[str, Thumbnail] = {}
        self._lock = threading.Lock()

    def wanted(self, record: Record) -> bool:
        """Whether `record` would be kept (before its thumbnail is made)."""
        rank = rank_of(record)
        if rank[0] >= self.threshold:
            return False
        with self._lock:
            return len(self._kept) < self.limit or _negated(rank) > self._kept[0][0]

    def keep(self, record: Record, page: PreparedImage) -> None:
        """Make and keep `record`'s thumbnail from its prepared page if it is among the first `limit`."""
        if not self.wanted(record):
            return
        picture, key = from_page(page), record.extraction.ref.key
        with self._lock:
            entry = (_negated(rank_of(record)), key)
            if len(self._kept) < self.limit:
                heapq.heappush(self._kept, entry)
            elif entry[0] > self._kept[0][0]:
                self._pictures.pop(heapq.heapreplace(self._kept, entry)[1], None)
            else:
                return
            self._pictures[key] = picture

    def get(self, key: str | None) -> Thumbnail | None:
        with self._lock:
            return self._pictures.get(key or "")


def _negated(rank: tuple[float, str, int]) -> tuple[float, tuple[int, ...], int]:
    """A rank whose order is reversed (heapq keeps the smallest first; the worst kept must be on top)."""
    confidence, path, page = rank
    return -confidence, tuple(-ord(c) for c in path) + (1,), -page
