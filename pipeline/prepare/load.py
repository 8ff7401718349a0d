"""Decode one page into an RGB uint8 array, whatever mode the file stores, no larger than the caller needs.

Why not just `convert("RGB")`: Pillow clips 16-bit samples to 255 (a 16-bit scan turns white), drops alpha
onto black (transparent PNG backgrounds turn black, text vanishes), and ignores palette transparency. Every
backend wants the same thing: 8-bit RGB on a white background.

Why the file is hashed again here: discovery hashed it earlier, and the file may have been rewritten since.
The page is decoded from the very bytes whose SHA-256 is checked against the ref's, so a row's hash and its
content can never disagree; a mismatch is a retryable `changed_during_run` failure.

Why a page is decoded at the size asked for: a full decode of an 11 MP JPEG costs ~90 ms of CPU, most of the
prepare stage, and the VLM never looks at more than 1600 px. A JPEG decoded with DCT scaling (1/2, 1/4, 1/8)
costs a fraction of that, and a PDF rendered at a lower dpi likewise; `VerifiedPage` picks the smallest decode
that still gives the asked size, and hands out a region of the page (the card on a flatbed scan) at exactly the
size asked, as a full decode then a resize would give it.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
from PIL import Image

from pipeline.datamodel import DocumentRef, Reason
from pipeline.ingest.containers import ContainerError, open_page, page_size, plain_png_pixels, read_document
from pipeline.prepare.resize import resize_to
from pipeline.settings import PrepareSettings

_WHITE = (255, 255, 255, 255)
_ALPHA_MODES = frozenset({"LA", "La", "PA", "RGBA", "RGBa"})
_WIDE_INT_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})


Box = tuple[int, int, int, int]  # (x0, y0, x1, y1) in full-size page pixels, x1/y1 exclusive


# A page at least this many times as wide as high may be a cut-out machine-readable zone (1-3 lines), which is
# readable down to half the minimum side: two 44-character lines of 12-15 px characters in a 40 px strip.
ZONE_STRIP_ASPECT = 2.8


def too_small(width: int, height: int, min_side: int) -> bool:
    """Below `min_side` on either side, except a landscape strip shaped like a cut-out zone
    (`ZONE_STRIP_ASPECT`) at least half `min_side` high."""
    if min(width, height) >= min_side:
        return False
    return not (width >= ZONE_STRIP_ASPECT * height and height >= min_side / 2)


class VerifiedPage:
    """One page of a document: its bytes read once and checked against the ref's SHA-256, its full size known
    from the header, its pixels decoded (at most twice, from those same bytes) at the size a caller asks for.

    Raises `ContainerError` for a bad page: from the constructor for the file, its header and its size, from
    `pixels` and `region` for pixel data that does not decode.
    """

    def __init__(self, ref: DocumentRef, settings: PrepareSettings) -> None:
        self._data = read_document(ref.path, settings.max_input_bytes)
        if hashlib.sha256(self._data).hexdigest() != ref.sha256:
            raise ContainerError(Reason.CHANGED_DURING_RUN,
                                 "file content changed since it was discovered (sha256 differs)")
        self._page, self._settings = ref.page, settings
        # (w, h) as shown, at full size (a PDF at pdf_dpi): the coordinates of every box.
        self.size = page_size(self._data, ref.page, settings)
        w, h = self.size
        if too_small(w, h, settings.min_input_side):
            raise ContainerError(Reason.TOO_SMALL, f"{w}x{h} is below min_input_side {settings.min_input_side}")
        # The last decode, in RGB, reused when it is large enough: a PIL image until a caller needs all of it as
        # an array, then only the array (a 4000 px page is 48 MB as a PIL image, 36 MB as an array).
        self._decoded: Image.Image | np.ndarray | None = None

    @property
    def decoded_size(self) -> tuple[int, int] | None:
        """(w, h) of the last decode (None before the first): how much was really decoded."""
        if isinstance(self._decoded, np.ndarray):
            return self._decoded.shape[1], self._decoded.shape[0]
        return None if self._decoded is None else self._decoded.size

    def pixels(self, long_edge: int | None = None) -> np.ndarray:
        """The whole page as RGB, decoded at full size, or smaller but with a long edge of at least
        `long_edge` (not resized to it: the caller decides how it shrinks what it gets)."""
        self._decode(1.0 if long_edge is None else long_edge / max(self.size))
        return self._as_array()

    def region(self, box: Box | None, size: tuple[int, int], *, slack: float = 0.0) -> np.ndarray:
        """`box` of the page (None: all of it) as RGB resized to `size` (w, h), from the smallest decode that
        allows it: one at most `slack` (a fraction) smaller on each side than `size`, then enlarged to it."""
        x0, y0, x1, y1 = box or (0, 0, *self.size)
        target_w, target_h = size
        width, height = self._decode(max(target_w / (x1 - x0), target_h / (y1 - y0)) * (1.0 - slack))
        # Box to decoded pixels, rounded outwards so the region never comes out smaller than the target.
        fx, fy = width / self.size[0], height / self.size[1]
        crop = (math.floor(x0 * fx), math.floor(y0 * fy),
                min(width, math.ceil(x1 * fx)), min(height, math.ceil(y1 * fy)))
        if isinstance(self._decoded, Image.Image) and crop != (0, 0, width, height):
            pixels = _array(self._decoded.crop(crop))  # cropped before the array copy: a card is a tenth of the page
        else:
            pixels = self._as_array()[crop[1]:crop[3], crop[0]:crop[2]]  # a view: no copy
        return resize_to(pixels, (target_w, target_h))

    def _decode(self, fraction: float) -> tuple[int, int]:
        """Decode the page at least `fraction` of its full size on each side (1 or more: full size), unless the
        last decode already is; its (w, h)."""
        fraction = min(fraction, 1.0)
        size = self.decoded_size
        if size is not None and min(size[0] / self.size[0], size[1] / self.size[1]) >= fraction:
            return size
        min_size = None
        if fraction < 1:  # the epsilon: float noise (asking 2000.0000001 px -> 2001) must not cost a DCT scale
            min_size = (max(1, math.ceil(self.size[0] * fraction - 1e-6)),
                        max(1, math.ceil(self.size[1] * fraction - 1e-6)))
        self._decoded = None  # free the previous decode first
        plain = plain_png_pixels(self._data, self._page, self._settings)  # always whole: no smaller decode
        self._decoded = plain if plain is not None else to_rgb(open_page(self._data, self._page, self._settings,
                                                                         min_size=min_size))
        size = self.decoded_size
        assert size is not None
        return size

    def _as_array(self) -> np.ndarray:
        """The last decode as an RGB array, converted once."""
        if isinstance(self._decoded, Image.Image):
            self._decoded = _array(self._decoded)
        assert self._decoded is not None
        return self._decoded


def load_page(ref: DocumentRef, settings: PrepareSettings) -> np.ndarray:
    """The page `ref` points at as a full-size (H, W, 3) RGB uint8 array; raises `ContainerError` for a bad page."""
    return VerifiedPage(ref, settings).pixels()


def _array(im: Image.Image) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(im, dtype=np.uint8))


def to_rgb(im: Image.Image) -> Image.Image:
    """8-bit RGB: wide grey scaled (not clipped), alpha and palette transparency composited on white."""
    if im.mode in _WIDE_INT_MODES:
        return _wide_grey_to_rgb(np.asarray(im))
    if im.mode == "F":
        return _grey_array_to_rgb(np.clip(np.asarray(im), 0, 255))
    if im.mode in _ALPHA_MODES or (im.mode == "P" and "transparency" in im.info):
        return _composite_on_white(im.convert("RGBA"))
    if im.mode == "RGB":
        return im  # convert() would copy it (~50 ms for a 4000 px scan) for nothing
    return im.convert("RGB")  # 1, L, P, CMYK, YCbCr, LAB, HSV


def _wide_grey_to_rgb(samples: np.ndarray) -> Image.Image:
    """16-bit (or 32-bit int holding 16-bit) grey to 8 bits by the full 0..65535 range, as viewers do."""
    scaled = np.clip(samples.astype(np.int64), 0, 65535) // 257
    return _grey_array_to_rgb(scaled)


def _grey_array_to_rgb(grey: np.ndarray) -> Image.Image:
    return Image.fromarray(np.round(grey).astype(np.uint8)).convert("RGB")


def _composite_on_white(rgba: Image.Image) -> Image.Image:
    background = Image.new("RGBA", rgba.size, _WHITE)
    return Image.alpha_composite(background, rgba).convert("RGB")
