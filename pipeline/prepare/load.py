"""Decode one page into an RGB uint8 array, whatever mode the file stores.

Why not just `convert("RGB")`: Pillow clips 16-bit samples to 255 (a 16-bit scan turns white), drops alpha
onto black (transparent PNG backgrounds turn black, text vanishes), and ignores palette transparency. Every
backend wants the same thing: 8-bit RGB on a white background.

Why the file is hashed again here: discovery hashed it earlier, and the file may have been rewritten since.
The page is decoded from the very bytes whose SHA-256 is checked against the ref's, so a row's hash and its
content can never disagree; a mismatch is a retryable `changed_during_run` failure.
"""

from __future__ import annotations

import hashlib

import numpy as np
from PIL import Image

from pipeline.config import PrepareSettings
from pipeline.containers import ContainerError, open_page, read_document
from pipeline.datamodel import DocumentRef, Reason

_WHITE = (255, 255, 255, 255)
_ALPHA_MODES = frozenset({"LA", "La", "PA", "RGBA", "RGBa"})
_WIDE_INT_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})


def load_page(ref: DocumentRef, settings: PrepareSettings) -> np.ndarray:
    """The page `ref` points at as an (H, W, 3) RGB uint8 array; raises `ContainerError` for a bad page."""
    data = read_document(ref.path, settings.max_input_bytes)
    if hashlib.sha256(data).hexdigest() != ref.sha256:
        raise ContainerError(Reason.CHANGED_DURING_RUN, "file content changed since it was discovered (sha256 differs)")
    im = open_page(data, ref.page, settings)
    w, h = im.size
    if min(w, h) < settings.min_input_side:
        raise ContainerError(Reason.TOO_SMALL, f"{w}x{h} is below min_input_side {settings.min_input_side}")
    return np.ascontiguousarray(np.asarray(to_rgb(im), dtype=np.uint8))


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
