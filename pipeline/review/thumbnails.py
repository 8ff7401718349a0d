"""Thumbnails of the prepared page (what a model sees), re-prepared from the source file.

The source is found again from the run summary's input folder and the row's relative path, and used only if
its bytes still hash to the row's sha256: a file that changed since the run would show a different document.
Thumbnails hold personal data, so they live only inside OUT (embedded in the review page), never in Prefect.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from pipeline.datamodel import DocumentRef, Failure
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import Orientation, cap_long_edge, encode, prepare_page
from pipeline.settings import PrepareSettings

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
