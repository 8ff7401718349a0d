"""Capture conditions and file containers.

Each condition is a pure function ``(image, rng) -> image`` where ``rng`` is a ``random.Random``; given the
same input and the same RNG state it returns the same pixels. Rotations are named by how the *content*
appears rotated clockwise in the stored file: ``rotate(img, 90)`` shows the document turned 90° clockwise,
so a reader must turn it 270° clockwise (90° counter-clockwise) to make it upright.

:func:`encode` writes one or more pages into PNG/JPEG/TIFF/WebP/PDF bytes deterministically (no timestamps),
optionally with an EXIF Orientation tag.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Callable, Sequence

import cv2
import numpy as np
from PIL import Image, ImageEnhance, ImageFilter

Condition = Callable[[Image.Image, random.Random], Image.Image]

# --------------------------------------------------------------------------------------------------------
# Geometric
# --------------------------------------------------------------------------------------------------------

_CW = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_90}


def rotate(img: Image.Image, degrees_cw: int) -> Image.Image:
    """Content turned ``degrees_cw`` (0/90/180/270) clockwise; lossless."""
    if degrees_cw % 360 == 0:
        return img.copy()
    return img.transpose(_CW[degrees_cw % 360])


# EXIF Orientation tag -> transpose that turns upright pixels into the stored pixels, so that a viewer
# applying the tag (PIL.ImageOps.exif_transpose) shows the document upright again.
EXIF_STORE = {3: Image.Transpose.ROTATE_180, 6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270}


def exif_stored_pixels(img: Image.Image, orientation: int) -> Image.Image:
    """Pixels to store with EXIF Orientation ``orientation`` (3, 6 or 8) for an upright display."""
    return img.transpose(EXIF_STORE[orientation])


def _fill_color(img: Image.Image) -> tuple[int, int, int]:
    return (250, 250, 248) if img.width * img.height > 2_000_000 else (245, 245, 243)


def skew(img: Image.Image, rng: random.Random, max_deg: float = 10.0, min_deg: float = 2.0,
         angle: float | None = None) -> Image.Image:
    """Small rotation (a crooked scan), ±[min_deg, max_deg] degrees, on a light scanner background."""
    if angle is None:
        angle = rng.uniform(min_deg, max_deg) * rng.choice((-1, 1))
    pad = 24
    canvas = Image.new("RGB", (img.width + 2 * pad, img.height + 2 * pad), _fill_color(img))
    canvas.paste(img, (pad, pad))
    return canvas.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=_fill_color(img))


def _smooth_noise(rng: random.Random, w: int, h: int, cells: int) -> np.ndarray:
    """Low-frequency noise in [0, 1] of shape (h, w)."""
    g = np.random.default_rng(rng.getrandbits(64))
    small = g.random((cells, max(2, cells * w // max(h, 1)))).astype(np.float32)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).clip(0, 1)


def _table(rng: random.Random, w: int, h: int) -> np.ndarray:
    """A table-top background: wood, dark desk or grey cloth."""
    g = np.random.default_rng(rng.getrandbits(64))
    kind = rng.choice(("wood", "desk", "cloth"))
    if kind == "wood":
        base = np.array([rng.randint(120, 160), rng.randint(80, 105), rng.randint(45, 65)], np.float32)
        y = np.arange(h, dtype=np.float32)[:, None]
        x = np.arange(w, dtype=np.float32)[None, :]
        grain = np.sin(y / rng.uniform(5, 9) + 3 * _smooth_noise(rng, w, h, 4) * 3.0 + x * 0.002)
        tex = (0.85 + 0.12 * grain)[..., None]
    elif kind == "desk":
        base = np.array([rng.randint(40, 70)] * 3, np.float32) + np.array([0, 2, 6], np.float32)
        tex = (0.9 + 0.2 * _smooth_noise(rng, w, h, 6))[..., None]
    else:
        base = np.array([rng.randint(150, 190)] * 3, np.float32) - np.array([0, 5, 12], np.float32)
        tex = (0.92 + 0.1 * _smooth_noise(rng, w, h, 10))[..., None]
    img = base * tex + g.normal(0, 4, (h, w, 1)).astype(np.float32)
    return img


def photo(img: Image.Image, rng: random.Random, max_deg: float = 8.0, min_deg: float = 4.0) -> Image.Image:
    """"Phone photo on a table": perspective, rotation ±[min_deg, max_deg]°, background, uneven light."""
    src = np.asarray(img.convert("RGB"), dtype=np.float32)
    h, w = src.shape[:2]
    ow, oh = int(w * 1.35), int(h * 1.35)
    angle = np.deg2rad(rng.uniform(min_deg, max_deg) * rng.choice((-1, 1)))
    scale = rng.uniform(0.84, 0.92)
    cx, cy = ow / 2 + rng.uniform(-0.03, 0.03) * ow, oh / 2 + rng.uniform(-0.03, 0.03) * oh
    corners = np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]], np.float32) * scale
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]], np.float32)
    dst = corners @ rot.T + np.array([cx, cy], np.float32)
    # perspective: the far edge (top or bottom) is narrower, plus small per-corner jitter
    k = rng.uniform(0.03, 0.07) * w * scale
    far_top = rng.random() < 0.7
    shrink = np.array([[k, 0], [-k, 0], [0, 0], [0, 0]] if far_top else [[0, 0], [0, 0], [-k, 0], [k, 0]],
                      np.float32)
    dst = dst + shrink @ rot.T
    dst += np.array([[rng.uniform(-0.012, 0.012) * w, rng.uniform(-0.012, 0.012) * h] for _ in range(4)],
                    np.float32)
    m = cv2.getPerspectiveTransform(np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float32), dst.astype(np.float32))
    warped = cv2.warpPerspective(src, m, (ow, oh), flags=cv2.INTER_LINEAR)
    mask2d = cv2.warpPerspective(np.ones((h, w), np.float32), m, (ow, oh), flags=cv2.INTER_LINEAR)
    mask = mask2d[..., None]
    # soft drop shadow under the card
    shadow = np.roll(cv2.GaussianBlur(mask2d, (0, 0), 9), (6, 5), axis=(0, 1))[..., None]
    bg = _table(rng, ow, oh) * (1 - 0.35 * shadow)
    out = bg * (1 - mask) + warped * mask
    # uneven lighting: a tilted plane plus a soft highlight
    yy, xx = np.mgrid[0:oh, 0:ow].astype(np.float32)
    gx, gy = rng.uniform(-0.25, 0.25), rng.uniform(-0.25, 0.25)
    light = 1.0 + gx * (xx / ow - 0.5) + gy * (yy / oh - 0.5)
    hx, hy, hr = rng.uniform(0.2, 0.8) * ow, rng.uniform(0.2, 0.8) * oh, rng.uniform(0.25, 0.45) * ow
    light += rng.uniform(0.04, 0.1) * np.exp(-((xx - hx) ** 2 + (yy - hy) ** 2) / (2 * hr * hr))
    light *= rng.uniform(0.88, 0.98)
    out = out * light[..., None]
    out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.5, 0.9))
    out += np.random.default_rng(rng.getrandbits(64)).normal(0, 2.5, out.shape).astype(np.float32)
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8), "RGB")


# --------------------------------------------------------------------------------------------------------
# Photometric
# --------------------------------------------------------------------------------------------------------


def blur(img: Image.Image, rng: random.Random, min_r: float = 1.2, max_r: float = 2.0) -> Image.Image:
    return img.filter(ImageFilter.GaussianBlur(rng.uniform(min_r, max_r)))


def noise(img: Image.Image, rng: random.Random, min_sigma: float = 10.0, max_sigma: float = 18.0) -> Image.Image:
    a = np.asarray(img.convert("RGB"), dtype=np.float32)
    g = np.random.default_rng(rng.getrandbits(64))
    a = a + g.normal(0, rng.uniform(min_sigma, max_sigma), a.shape[:2] + (1,)).astype(np.float32) \
        + g.normal(0, 3, a.shape).astype(np.float32)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def low_contrast(img: Image.Image, rng: random.Random) -> Image.Image:
    """Washed-out scan: contrast 0.35-0.5, brightened."""
    out = ImageEnhance.Contrast(img).enhance(rng.uniform(0.35, 0.5))
    return ImageEnhance.Brightness(out).enhance(rng.uniform(1.05, 1.2))


def jpeg_roundtrip(img: Image.Image, rng: random.Random, quality: int = 25) -> Image.Image:
    """Heavy JPEG compression artefacts (the file should then also be saved at this quality)."""
    buf = io.BytesIO()
    img.convert("RGB").save(buf, "JPEG", quality=quality)
    buf.seek(0)
    return Image.open(buf).convert("RGB")


# --------------------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------------------

FLATBED_LONG_EDGE = 4000
_FLATBED_SCALE = 1.9  # a 856 px card (~254 dpi) becomes ~1630 px (~480 dpi on a 4000 px A4 page)


def flatbed(img: Image.Image, rng: random.Random) -> Image.Image:
    """A4 flatbed scan, long edge 4000 px, with the document in a corner at its physical size.

    Pages that are already A4-like (portrait, taller than 2000 px) are just rescaled to the page size.
    """
    pw, ph = round(FLATBED_LONG_EDGE / 2 ** 0.5), FLATBED_LONG_EDGE
    page = Image.new("RGB", (pw, ph), (250, 250, 247))
    if img.height > img.width and img.height > 2000:
        doc = img.resize((pw, ph), Image.Resampling.BICUBIC)
        page.paste(doc, (0, 0))
    else:
        doc = img.resize((round(img.width * _FLATBED_SCALE), round(img.height * _FLATBED_SCALE)),
                         Image.Resampling.BICUBIC)
        m = rng.randint(40, 120)
        corner = rng.choice(("tl", "tr", "bl", "br"))
        x = m if corner[1] == "l" else pw - doc.width - m
        y = m if corner[0] == "t" else ph - doc.height - m
        page.paste(doc, (x, y))
    a = np.asarray(page, dtype=np.int16)
    g = np.random.default_rng(rng.getrandbits(64))
    a = a + g.integers(-3, 4, a.shape[:2] + (1,), dtype=np.int16)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def small(img: Image.Image, rng: random.Random, long_edge: int = 500) -> Image.Image:
    """A small capture: long edge ``long_edge`` px."""
    s = long_edge / max(img.size)
    return img.resize((max(1, round(img.width * s)), max(1, round(img.height * s))), Image.Resampling.LANCZOS)


# --------------------------------------------------------------------------------------------------------
# Containers
# --------------------------------------------------------------------------------------------------------

FORMATS = {"png": ".png", "jpeg": ".jpg", "tiff": ".tif", "webp": ".webp", "pdf": ".pdf"}
_FIXED_TIME = time.struct_time((2026, 1, 1, 0, 0, 0, 3, 1, 0))


def encode(pages: Image.Image | Sequence[Image.Image], fmt: str, *, quality: int = 85,
           exif_orientation: int | None = None, dpi: int = 200, title: str = "specimen") -> bytes:
    """Deterministic bytes of ``pages`` in ``fmt`` (png|jpeg|tiff|webp|pdf); tiff and pdf take many pages."""
    if isinstance(pages, Image.Image):
        pages = [pages]
    pages = [p.convert("RGB") for p in pages]
    first, rest = pages[0], list(pages[1:])
    if rest and fmt not in ("tiff", "pdf"):
        raise ValueError(f"{fmt} cannot hold {len(pages)} pages")
    buf = io.BytesIO()
    if fmt == "png":
        first.save(buf, "PNG", compress_level=6)
    elif fmt == "jpeg":
        kw = {}
        if exif_orientation:
            exif = Image.Exif()
            exif[0x0112] = exif_orientation
            kw["exif"] = exif.tobytes()
        first.save(buf, "JPEG", quality=quality, optimize=True, dpi=(dpi, dpi), **kw)
    elif fmt == "tiff":
        first.save(buf, "TIFF", compression="tiff_adobe_deflate", save_all=bool(rest), append_images=rest,
                   dpi=(dpi, dpi))
    elif fmt == "webp":
        first.save(buf, "WEBP", quality=quality, method=4)
    elif fmt == "pdf":
        # JPEG-compressed pages via Pillow's PDF writer; fixed dates and title keep the bytes stable.
        first.save(buf, "PDF", resolution=float(dpi), save_all=bool(rest), append_images=rest,
                   title=title, creationDate=_FIXED_TIME, modDate=_FIXED_TIME, quality=quality)
    else:
        raise ValueError(f"unknown format {fmt!r}")
    if exif_orientation and fmt != "jpeg":
        raise ValueError("EXIF orientation is only written for JPEG")
    return buf.getvalue()


# name -> condition function, for the eval set
CONDITIONS: dict[str, Condition] = {
    "clean": lambda img, rng: img.copy(),
    "rot90": lambda img, rng: rotate(img, 90),
    "rot180": lambda img, rng: rotate(img, 180),
    "rot270": lambda img, rng: rotate(img, 270),
    "skew": skew,
    "photo": photo,
    "blur": blur,
    "noise": noise,
    "low_contrast": low_contrast,
    "jpeg25": jpeg_roundtrip,
    "flatbed": flatbed,
    "small": small,
}
