"""Input containers: what a file really is, how many pages it holds, and one page decoded as a PIL image.

Why sniff magic bytes: scans arrive renamed by people and scanners (a PNG called `.jpg`, a text file called
`.jpg`); the extension is a hint, the first bytes are the truth. Why check the declared size before decoding: a
few hundred bytes of PNG can declare a 100k x 100k image, and decoding it would take the whole machine down.

Why every function takes the file's bytes (a `Path` is read first with `read_document`): a document is read
once, and its SHA-256, page count and pixels all come from those same bytes, so a file overwritten during a
run can never give a row whose hash and content disagree. `read_document` only ever opens regular files
(a FIFO would block the run forever, a device could be endless), and caps the size it reads.

Every problem raises one exception type, `ContainerError`, carrying a stable `Reason` so the caller turns it
into a `Failure` without string matching. Container-level problems (the file cannot be identified or opened)
are `empty_file` / `unsupported_type` / `unreadable` / `too_many_pixels` / `not_a_regular_file` /
`too_large` / `path_too_long` / `broken_symlink` / `changed_during_run`; a header that parses but whose pixel
data does not (truncated or corrupt stream) is `decode_error`. Details never contain the path (names can be
personal data, or not even valid UTF-8).
"""

from __future__ import annotations

import errno
import io
import math
import os
import re
import stat
import threading
import warnings
from enum import StrEnum
from pathlib import Path

import cv2
import numpy as np
import pypdfium2 as pdfium
from PIL import ExifTags, Image, ImageOps

from pipeline.datamodel import Reason
from pipeline.settings import PrepareSettings

_SNIFF_BYTES = 1024  # PDF allows junk before "%PDF-" within the first 1 KiB
_PDF_POINTS_PER_INCH = 72.0
_TRANSPOSING_ORIENTATIONS = frozenset({5, 6, 7, 8})  # EXIF turns that swap width and height

# pdfium is not thread-safe: every call into it (open, count, render, close) goes through this lock.
_PDFIUM_LOCK = threading.Lock()


class ContainerError(Exception):
    """A document that cannot be turned into pixels, with a stable reason code and a human detail."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Kind(StrEnum):
    """Container types we accept; the value is Pillow's format name (PDF goes through pdfium instead)."""

    JPEG = "JPEG"
    PNG = "PNG"
    TIFF = "TIFF"
    BMP = "BMP"
    WEBP = "WEBP"
    PDF = "PDF"


# A file that is a document, or a `Path` to read it from.
Source = Path | bytes

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def read_document(path: Path, max_bytes: int, *, follow_symlinks: bool = True) -> bytes:
    """The whole file, read once; raises `ContainerError` for anything that is not a regular file of at
    most `max_bytes`.

    The type is checked with stat before opening, so a FIFO, socket or device is never opened (opening a FIFO
    blocks until a writer appears). The open itself is non-blocking (and, when `follow_symlinks` is false,
    refuses a symlink), and the opened descriptor is checked again, so a file swapped for something else
    between the two steps is caught rather than read.
    """
    try:
        _check_regular(os.stat(path, follow_symlinks=follow_symlinks), max_bytes)
        fd = os.open(path, _OPEN_FLAGS | (0 if follow_symlinks else os.O_NOFOLLOW))
        with os.fdopen(fd, "rb") as fh:
            size = _check_regular(os.fstat(fh.fileno()), max_bytes)
            os.set_blocking(fd, True)  # non-blocking was for the open; a regular file reads normally
            data = fh.read(size + 1)  # sized by fstat: read(max_bytes) would allocate max_bytes every time
            if len(data) > size:  # growing while we read: take the rest, up to the cap
                data += fh.read(max_bytes + 1 - len(data))
    except OSError as e:
        raise os_failure(e) from e
    if len(data) > max_bytes:  # grew after the size check
        raise ContainerError(Reason.TOO_LARGE, f"file is over max_input_bytes {max_bytes:,}")
    return data


def file_type(mode: int) -> str:
    """What a non-regular file is, in words, for failure details."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


def _check_regular(st: os.stat_result, max_bytes: int) -> int:
    """The file's size, if it is a regular file no larger than `max_bytes`."""
    if not stat.S_ISREG(st.st_mode):
        raise ContainerError(Reason.NOT_A_REGULAR_FILE, f"a {file_type(st.st_mode)}, not a regular file; not read")
    if st.st_size > max_bytes:
        raise ContainerError(Reason.TOO_LARGE, f"{st.st_size:,} bytes > max_input_bytes {max_bytes:,}")
    return st.st_size


def os_failure(e: OSError) -> ContainerError:
    """The stable reason for an OS error on a file that was listed (or discovered) a moment ago."""
    if e.errno == errno.ENAMETOOLONG:
        return ContainerError(Reason.PATH_TOO_LONG, "path is longer than the system can open")
    if e.errno == errno.ELOOP:
        return ContainerError(Reason.BROKEN_SYMLINK, "symlink loop; not followed")
    if e.errno == errno.ENOENT:
        return ContainerError(Reason.CHANGED_DURING_RUN, "file vanished after it was listed")
    return ContainerError(Reason.UNREADABLE, f"cannot read file: {e.strerror}")


_PNG_EXIF_MARKERS = (b"eXIf", b"Raw profile type exif")


def _data(source: Source, settings: PrepareSettings) -> bytes:
    return source if isinstance(source, bytes) else read_document(source, settings.max_input_bytes)


def sniff(source: Source, settings: PrepareSettings | None = None) -> Kind:
    """The real container type from the file's first bytes; raises for empty or unknown files."""
    head = _data(source, settings or PrepareSettings())[:_SNIFF_BYTES]
    if not head:
        raise ContainerError(Reason.EMPTY_FILE, "file is 0 bytes")
    kind = _kind_from_magic(head)
    if kind is None:
        raise ContainerError(Reason.UNSUPPORTED_TYPE, f"unknown magic bytes {head[:8]!r}")
    return kind


def _kind_from_magic(head: bytes) -> Kind | None:
    if head.startswith(b"\xff\xd8\xff"):
        return Kind.JPEG
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Kind.PNG
    if head[:4] in (b"II*\x00", b"MM\x00*"):
        return Kind.TIFF
    if head.startswith(b"BM"):
        return Kind.BMP
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Kind.WEBP
    if b"%PDF-" in head:
        return Kind.PDF
    return None


def page_count(source: Source, settings: PrepareSettings | None = None) -> int:
    """Pages in the file: every frame of a multi-page TIFF, every PDF page, 1 for other images.

    Opening the header here (not only sniffing) lets ingest reject unreadable files and bombs up front.
    """
    settings = settings or PrepareSettings()
    data = _data(source, settings)
    kind = sniff(data, settings)
    if kind is Kind.PDF:
        return _pdf_page_count(data)
    with _open_image(data, kind, settings) as im:
        # Only TIFF frames are pages; the frames of an animated PNG/WebP are not separate documents.
        return _tiff_frames(im) if kind is Kind.TIFF else 1


def open_page(source: Source, page: int, settings: PrepareSettings, *,
              min_size: tuple[int, int] | None = None) -> Image.Image:
    """Page `page` (0-based) decoded into memory, as a viewer shows it (EXIF orientation applied).

    PDF pages are rendered at `settings.pdf_dpi`. Pixel mode is left as stored (CMYK, I;16, P, ...).

    `min_size` (w, h as shown) lets the page come out smaller than `page_size`, but never below `min_size` on
    either side: a JPEG is decoded with DCT scaling by 1/2, 1/4 or 1/8 (the largest that keeps `min_size`; the
    decoder then skips the fine detail, so a 1/2 decode costs about a third of a full one), a PDF is rendered at
    the dpi that gives `min_size` (never above `pdf_dpi`). Other formats are always decoded whole. The pixel cap
    applies to the full declared size either way.
    """
    data = _data(source, settings)
    kind = sniff(data, settings)
    if kind is Kind.PDF:
        return _render_pdf_page(data, page, settings, min_size)
    im = _open_image(data, kind, settings)  # in memory: nothing to close, and the page may be `im` itself
    _seek(im, page)
    _check_pixels(im.size, settings)
    if min_size is not None and kind is Kind.JPEG:
        w, h = min_size
        im.draft(None, (h, w) if _orientation(im) in _TRANSPOSING_ORIENTATIONS else (w, h))
    return _decode(im)


def plain_png_pixels(data: bytes, page: int, settings: PrepareSettings) -> np.ndarray | None:
    """A PNG of 8-bit grey or RGB samples (or 16-bit RGB) without transparency, EXIF or frames, decoded by OpenCV
    straight into an RGB array; None for any other page, which `open_page` decodes.

    Why: such a PNG is most of the PNGs scanners and phones write, and it is decoded whole. Through Pillow it is
    held three times at once (the image at 4 bytes a pixel, its bytes, then the array); OpenCV decodes it into
    the array alone, in less CPU, releasing the GIL (a VLM run of half PNG pages does 7% more documents/s). The
    pixels are the same (PNG is lossless; 16-bit samples keep their high byte either way). A stream OpenCV cannot
    decode gives None too, so Pillow's decode reports it as for any other page. The pixel cap is checked first."""
    if page != 0 or _kind_from_magic(data[:_SNIFF_BYTES]) is not Kind.PNG or _may_hold_exif(data, Kind.PNG):
        return None
    with _open_image(data, Kind.PNG, settings) as im:
        if im.mode not in _PLAIN_PNG_MODES or "transparency" in im.info or getattr(im, "is_animated", False):
            return None
    # Decoded into RGB order by libpng itself: a BGR decode then a conversion would pass over the whole page again
    # (4 of the 33 ms a 2 MP scan takes).
    return cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)


_PLAIN_PNG_MODES = frozenset({"L", "RGB"})


def page_size(source: Source, page: int, settings: PrepareSettings) -> tuple[int, int]:
    """(width, height) of a page as `open_page` gives it at full size (EXIF turn included), from the header
    alone: what `--dry-run` needs to predict tokens without decoding a whole folder, and what `prepare` needs to
    decide how small a page may be decoded."""
    data = _data(source, settings)
    kind = sniff(data, settings)
    if kind is Kind.PDF:
        with _PDFIUM_LOCK:
            doc = _open_pdf(data)
            try:
                w_pt, h_pt = doc[page].get_size()
            finally:
                doc.close()
        return _pdf_pixels(w_pt, h_pt, settings.pdf_dpi / _PDF_POINTS_PER_INCH)
    with _open_image(data, kind, settings) as im:
        _seek(im, page)
        w, h = im.size
        # Pillow turns a TIFF frame itself (its size is already as shown); other formats are turned by `_upright`.
        if kind is not Kind.TIFF and _may_hold_exif(data, kind) and _orientation(im) in _TRANSPOSING_ORIENTATIONS:
            return h, w
        return w, h


def _may_hold_exif(data: bytes, kind: Kind) -> bool:
    """False for a PNG whose bytes hold no EXIF anywhere. Pillow looks for a PNG's EXIF by decoding the whole
    image (the chunk may follow the pixel data), which doubled the cost of preparing a PNG page; a PNG can keep
    EXIF only in an eXIf chunk or ImageMagick's "Raw profile type exif" text, both named in plain bytes."""
    return kind is not Kind.PNG or any(marker in data for marker in _PNG_EXIF_MARKERS)


def _grouped(message: str) -> str:
    """Counts in a message with thousands separators: `3,600,000,000 pixels` stays readable where the masking of
    details would take a bare run of 9+ digits for a document number."""
    return re.sub(r"\d{4,}", lambda m: f"{int(m.group()):,}", message)


def _open_image(data: bytes, kind: Kind, settings: PrepareSettings) -> Image.Image:
    """Parse the header only (Pillow is lazy) restricted to the sniffed format, and check the declared size."""
    try:
        with warnings.catch_warnings():
            # Our own cap below decides; Pillow's warning band (89M-179M px) would just be noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data), formats=[kind.value])
    except Image.DecompressionBombError as e:
        raise ContainerError(Reason.TOO_MANY_PIXELS, _grouped(str(e))) from e
    except Exception as e:  # noqa: BLE001 - any parser failure on a header means the same thing
        raise ContainerError(Reason.UNREADABLE, f"cannot parse {kind} header: {e}") from e
    try:
        _check_pixels(im.size, settings)
    except ContainerError:
        im.close()
        raise
    return im


def _tiff_frames(im: Image.Image) -> int:
    """Frame count of a TIFF; Pillow walks the whole IFD chain for it, and a damaged chain raises anything."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Corrupt EXIF data" and friends: the exception below decides
            return int(im.n_frames)
    except Exception as e:  # noqa: BLE001 - TypeError, struct.error, OSError... all mean a broken IFD chain
        raise ContainerError(Reason.UNREADABLE, f"cannot count TIFF pages: {type(e).__name__}: {e}") from e


def _seek(im: Image.Image, page: int) -> None:
    try:
        im.seek(page)
    except (EOFError, ValueError) as e:
        raise ContainerError(Reason.UNREADABLE, f"page {page} not in file: {e}") from e


def _check_pixels(size: tuple[int, int], settings: PrepareSettings) -> None:
    w, h = size
    if w * h > settings.max_input_pixels:
        raise ContainerError(Reason.TOO_MANY_PIXELS,
                             f"declared {w}x{h} = {w * h:,} px > max_input_pixels {settings.max_input_pixels:,}")


def _decode(im: Image.Image) -> Image.Image:
    """Force the pixel decode; a truncated or corrupt stream raises instead of yielding grey padding."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im.load()
    except Image.DecompressionBombError as e:
        raise ContainerError(Reason.TOO_MANY_PIXELS, _grouped(str(e))) from e
    except Exception as e:  # noqa: BLE001 - decoders raise OSError, SyntaxError, ValueError, zlib.error...
        raise ContainerError(Reason.DECODE_ERROR, f"cannot decode {im.format} data: {e}") from e
    return _upright(im)


def _upright(im: Image.Image) -> Image.Image:
    """The page turned as the EXIF Orientation tag says; the decoded image itself when it needs no turn (a copy
    of a 4000 px scan costs ~50 ms). Done right after decoding because TIFF reads its tags from the frame."""
    if _orientation(im) in (0, 1):
        return im
    try:
        return ImageOps.exif_transpose(im)
    except Exception:  # noqa: BLE001 - a broken EXIF block must not cost us a readable page
        return im


def _orientation(im: Image.Image) -> int:
    """The EXIF Orientation tag (1: as stored); 1 when the EXIF block is missing or broken."""
    try:
        return int(im.getexif().get(ExifTags.Base.Orientation, 1))
    except Exception:  # noqa: BLE001 - a broken EXIF block must not cost us a readable page
        return 1


def _open_pdf(data: bytes) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as e:
        raise ContainerError(Reason.UNREADABLE, f"cannot open PDF: {e}") from e


def _pdf_page_count(data: bytes) -> int:
    with _PDFIUM_LOCK:
        doc = _open_pdf(data)
        try:
            n = len(doc)
        finally:
            doc.close()
    if n < 1:
        raise ContainerError(Reason.UNREADABLE, "PDF has no pages")
    return n


def _pdf_pixels(w_pt: float, h_pt: float, scale: float) -> tuple[int, int]:
    """Bitmap size pdfium renders a page of this many points at `scale` (pypdfium2 rounds up)."""
    return math.ceil(w_pt * scale), math.ceil(h_pt * scale)


def _render_pdf_page(data: bytes, page: int, settings: PrepareSettings,
                     min_size: tuple[int, int] | None) -> Image.Image:
    scale = settings.pdf_dpi / _PDF_POINTS_PER_INCH
    with _PDFIUM_LOCK:
        doc = _open_pdf(data)
        try:
            if not 0 <= page < len(doc):
                raise ContainerError(Reason.UNREADABLE, f"page {page} not in PDF of {len(doc)} pages")
            pdf_page = doc[page]
            w_pt, h_pt = pdf_page.get_size()
            _check_pixels(_pdf_pixels(w_pt, h_pt, scale), settings)
            if min_size is not None:  # the lowest dpi that still gives min_size
                scale = min(scale, max(min_size[0] / w_pt, min_size[1] / h_pt))
            try:
                bitmap = pdf_page.render(scale=scale, may_draw_forms=True)
            except pdfium.PdfiumError as e:
                raise ContainerError(Reason.DECODE_ERROR, f"cannot render PDF page {page}: {e}") from e
            return bitmap.to_pil().copy()  # copy: the bitmap buffer dies with the document
        finally:
            doc.close()
