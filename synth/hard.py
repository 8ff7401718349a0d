"""Harder capture conditions, for tuning the MRZ second reading and the confidence calibration.

They differ from :mod:`synth.conditions` in one way: some need to know where the MRZ is (glare, hologram foil
and an occluder are put *over the MRZ*), so each takes the rendered document (``Rendered.mrz_boxes``), not
just its pixels. They are kept in a separate set (``make_samples.py --set hard``) so a tuning seed of it
never doubles as the evaluation seed of the ordinary set.

Each condition is ``(rendered, rng) -> image``, deterministic for a given RNG state, and stays *solvable*:
text under glare or foil keeps some contrast, an occluder covers only filler positions of one MRZ line (the
information is still on the page, as on the real captures this imitates), so the ground truth is what a
careful human reads from the image.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from synth import conditions as C
from synth.render import Rendered, font

HardCondition = Callable[[Rendered, random.Random], Image.Image]


def _array(img: Image.Image) -> np.ndarray:
    return np.asarray(img.convert("RGB"), dtype=np.float32)


def _image(a: np.ndarray) -> Image.Image:
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB")


def _mrz_band(r: Rendered) -> tuple[int, int, int, int]:
    """The MRZ lines' union box, or the lower third of the page for documents without an MRZ."""
    if not r.mrz_boxes:
        w, h = r.image.size
        return (w // 10, 2 * h // 3, 9 * w // 10, h - h // 12)
    xs0, ys0, xs1, ys1 = zip(*r.mrz_boxes)
    return (min(xs0), min(ys0), max(xs1), max(ys1))


def _gauss_spot(h: int, w: int, cx: float, cy: float, rx: float, ry: float, angle: float) -> np.ndarray:
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    dx, dy = xx - cx, yy - cy
    c, s = np.cos(angle), np.sin(angle)
    u, v = (dx * c + dy * s) / rx, (-dx * s + dy * c) / ry
    return np.exp(-(u * u + v * v) / 2)


# ------------------------------------------------------------------------------------- over the page


def watermark(r: Rendered, rng: random.Random) -> Image.Image:
    """Security print over the whole data page, MRZ included: dense guilloche rosettes, a large faint
    emblem-like ring and a diagonal repeated word, as printed on real passport pages."""
    a = _array(r.image)
    h, w = a.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    cx, cy = rng.uniform(0.3, 0.7) * w, rng.uniform(0.3, 0.7) * h
    rad, ang = np.hypot(xx - cx, yy - cy), np.arctan2(yy - cy, xx - cx)
    k = rng.randint(9, 17)
    rosette = np.sin(rad / rng.uniform(4, 7) + 3.0 * np.sin(k * ang + rad / 40))
    strength = rng.uniform(0.22, 0.35)
    lines = np.clip(1 - np.abs(rosette) / 0.25, 0, 1) * strength
    tint = np.array([rng.randint(90, 200), rng.randint(90, 200), rng.randint(120, 220)], np.float32)
    a = a * (1 - lines[..., None]) + tint * lines[..., None]
    ring = np.exp(-((rad - rng.uniform(0.2, 0.35) * w) / (0.03 * w)) ** 2) * rng.uniform(0.12, 0.2)
    a = a * (1 - ring[..., None]) + tint * ring[..., None]
    stamp = Image.new("L", (w, h), 0)
    draw = ImageDraw.Draw(stamp)
    word = rng.choice(("SPECIMEN", "SECURITY", "REPUBLIC"))
    f = font("sans_bold", max(20, h // 9))
    for row in range(-2, 6):
        draw.text((rng.randint(-200, 0), row * h // 4), (word + "   ") * 6, font=f, fill=255)
    stamp = stamp.rotate(rng.uniform(15, 35), resample=Image.Resampling.BILINEAR)
    alpha = np.asarray(stamp, np.float32)[..., None] / 255 * rng.uniform(0.10, 0.16)
    return _image(a * (1 - alpha) + tint * alpha)


def dark_phone(r: Rendered, rng: random.Random) -> Image.Image:
    """An underexposed phone photo: perspective on a table, then exposure cut to 25-40 %, sensor noise
    lifted with the gain, a warm cast, and the 1600 px long edge of a messaging-app copy."""
    img = C.photo(r.image, rng)
    a = _array(img) / 255.0
    a = np.power(a, rng.uniform(1.1, 1.4)) * rng.uniform(0.25, 0.4)
    a *= np.array([1.0, rng.uniform(0.9, 0.97), rng.uniform(0.75, 0.9)], np.float32)
    g = np.random.default_rng(rng.getrandbits(64))
    a = a * 255 + g.normal(0, rng.uniform(3, 6), a.shape[:2] + (1,)).astype(np.float32)
    return C.small(_image(a), rng, long_edge=1600)


def phone512(r: Rendered, rng: random.Random) -> Image.Image:
    """A phone photo shared at 512 px long edge (the capture size of many web uploads)."""
    return C.small(C.photo(r.image, rng), rng, long_edge=512)


def thumbnail(r: Rendered, rng: random.Random) -> Image.Image:
    """A thumbnail-size phone photo (300-360 px long edge: a chat preview, a form's upload preview), turned
    upside down half the time: a card's printed name is ~10 px tall. Opt-in (`OPT_IN`): below the capture size
    the reader is specified for, so not in a hard set by default; tuning material for the calibration, which
    must learn what an unsure reading of a small name is worth instead of trusting it like a sharp one."""
    img = C.small(C.photo(r.image, rng), rng, long_edge=rng.randint(300, 360))
    return C.rotate(img, 180) if rng.random() < 0.5 else img


def motion_blur(r: Rendered, rng: random.Random) -> Image.Image:
    """Camera shake: a straight motion-blur kernel of 6-11 px at a random angle."""
    length = rng.randint(6, 11)
    kernel = np.zeros((length, length), np.float32)
    kernel[length // 2, :] = 1.0
    m = cv2.getRotationMatrix2D((length / 2 - 0.5, length / 2 - 0.5), rng.uniform(0, 180), 1.0)
    kernel = cv2.warpAffine(kernel, m, (length, length))
    kernel /= kernel.sum()
    return _image(cv2.filter2D(_array(r.image), -1, kernel))


def jpeg15(r: Rendered, rng: random.Random) -> Image.Image:
    """Quality-15 JPEG (the file is then saved at that quality too)."""
    return C.jpeg_roundtrip(r.image, rng, quality=15)


def moire(r: Rendered, rng: random.Random) -> Image.Image:
    """A photo of the document shown on a screen: the sub-pixel grid (RGB stripes), sampled by the camera
    at a slight angle and scale, beats into moiré bands; plus the screen's gamma and a little blur."""
    a = _array(r.image)
    h, w = a.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    angle = np.deg2rad(rng.uniform(1, 6))
    pitch = rng.uniform(2.6, 3.4)
    u = (xx * np.cos(angle) + yy * np.sin(angle)) / pitch
    v = (-xx * np.sin(angle) + yy * np.cos(angle)) / pitch
    depth = rng.uniform(0.25, 0.4)
    grid = np.stack([0.5 + 0.5 * np.cos(2 * np.pi * (u - k / 3)) for k in range(3)], axis=-1)
    rows = (0.5 + 0.5 * np.cos(2 * np.pi * v))[..., None]
    a = a * (1 - depth + depth * grid * (0.6 + 0.4 * rows))
    a = cv2.GaussianBlur(a, (0, 0), rng.uniform(0.6, 1.0))
    scale = rng.uniform(0.62, 0.8)  # the camera resamples: the beat frequencies become visible bands
    small = cv2.resize(a, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_NEAREST)
    a = small / max(small.max(), 1) * 255 * rng.uniform(0.85, 1.0)
    return _image(a)


def rotated(degrees: int) -> HardCondition:
    """A phone photo of the document, stored turned ``degrees`` clockwise (no EXIF tag)."""
    def condition(r: Rendered, rng: random.Random) -> Image.Image:
        return C.rotate(C.photo(r.image, rng), degrees)
    return condition


# -------------------------------------------------------------------------------------- over the MRZ


def glare(r: Rendered, rng: random.Random) -> Image.Image:
    """Specular glare on the MRZ (a lamp reflected by the laminate): 1-2 bright elliptic spots washing the
    print out to 10-20 % of its contrast, with a saturated core off the text lines."""
    a = _array(r.image)
    h, w = a.shape[:2]
    x0, y0, x1, y1 = _mrz_band(r)
    wash = np.zeros((h, w), np.float32)
    for _ in range(rng.randint(1, 2)):
        cx, cy = rng.uniform(x0, x1), rng.uniform(y0, y1)
        spot = _gauss_spot(h, w, cx, cy, rng.uniform(0.08, 0.18) * w, rng.uniform(0.04, 0.09) * h,
                           rng.uniform(-0.5, 0.5))
        wash = np.maximum(wash, spot)
    strength = rng.uniform(0.8, 0.9)
    a = a * (1 - strength * wash[..., None]) + 255 * strength * wash[..., None]
    return C.photo(_image(a), rng, max_deg=4, min_deg=1)


def hologram(r: Rendered, rng: random.Random) -> Image.Image:
    """Hologram foil laminated over the MRZ: iridescent bands (hue changing along the band), a fine
    diffraction pattern and a few brighter patches, semi-transparent over the print."""
    a = _array(r.image)
    h, w = a.shape[:2]
    x0, y0, x1, y1 = _mrz_band(r)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    phase = xx / rng.uniform(60, 140) + yy / rng.uniform(90, 200) + rng.uniform(0, 6.28)
    rainbow = np.stack([0.5 + 0.5 * np.sin(phase + k * 2.094) for k in range(3)], axis=-1) * 255
    fine = 0.5 + 0.5 * np.sin((xx + yy * 0.3) / rng.uniform(1.6, 2.4))
    pad_y = (y1 - y0) * 0.4
    inside = ((xx > x0 - 30) & (xx < x1 + 30) & (yy > y0 - pad_y) & (yy < y1 + pad_y)).astype(np.float32)
    mask = cv2.GaussianBlur(inside, (0, 0), 6)
    alpha = mask * (rng.uniform(0.4, 0.5) + 0.12 * fine)
    for _ in range(rng.randint(1, 3)):
        alpha += mask * 0.25 * _gauss_spot(h, w, rng.uniform(x0, x1), rng.uniform(y0, y1),
                                           rng.uniform(30, 90), rng.uniform(15, 35), 0.0)
    alpha = np.clip(alpha, 0, 0.7)[..., None]
    a = a * (1 - alpha) + rainbow * alpha
    return C.photo(_image(a), rng, max_deg=4, min_deg=1)


def occlusion(r: Rendered, rng: random.Random) -> Image.Image:
    """One MRZ line partly covered: either a UI box drawn round the zone whose edges run through the first
    and last lines, or an opaque sticker over the trailing fillers of one line (only fillers: what it hides
    is recoverable, as on the real capture with a drawn box)."""
    img = r.image.convert("RGB").copy()
    draw = ImageDraw.Draw(img)
    if not r.mrz_boxes:
        return img
    x0, _, x1, _ = _mrz_band(r)
    if rng.random() < 0.5:
        colour = rng.choice(((230, 40, 40), (40, 160, 60), (30, 90, 220)))
        first, last = r.mrz_boxes[0], r.mrz_boxes[-1]
        top = first[1] + (first[3] - first[1]) * rng.uniform(0.3, 0.7)
        bottom = last[1] + (last[3] - last[1]) * rng.uniform(0.3, 0.7)
        draw.rectangle((x0 - rng.randint(5, 30), top, x1 + rng.randint(5, 30), bottom), outline=colour,
                       width=rng.randint(3, 5))
        return img
    # sticker over the trailing fillers of a line that has enough of them
    lines = [(i, r.mrz[i]) for i in range(len(r.mrz)) if len(r.mrz[i]) - len(r.mrz[i].rstrip("<")) >= 6]
    if not lines:
        return img
    i, text = rng.choice(lines)
    left, top, right, bottom = r.mrz_boxes[i]
    char_w = (right - left) / len(text)
    start = left + char_w * (len(text.rstrip("<")) + 1)
    end = min(right + char_w, start + char_w * rng.randint(5, 12))
    pad = (bottom - top) * 0.25
    draw.rounded_rectangle((start, top - pad, end, bottom + pad), radius=6,
                           fill=rng.choice(((250, 236, 120), (235, 235, 235), (200, 160, 140))))
    return img


def mrz_strip(r: Rendered, rng: random.Random) -> Image.Image:
    """The zone alone, as passport readers, kiosks and scanners save it: the document cropped to its MRZ lines
    with a margin of a fraction of a line (down to almost touching the characters), a slight tilt, the size the
    device stores (300-1200 px wide, 7-27 px a character), a little optical blur; a third in grey, a third
    binarised by the device."""
    x0, y0, x1, y1 = _mrz_band(r)
    line_h = float(np.median([b[3] - b[1] for b in r.mrz_boxes]))
    mx, my = rng.uniform(0.05, 1.2) * line_h, rng.uniform(0.05, 0.6) * line_h
    w, h = r.image.size
    crop = r.image.convert("RGB").crop((max(0, round(x0 - mx)), max(0, round(y0 - my)), min(w, round(x1 + mx)),
                                        min(h, round(y1 + my))))
    angle = rng.uniform(-1.5, 1.5)
    crop = crop.rotate(angle, resample=Image.Resampling.BICUBIC, expand=True, fillcolor=crop.getpixel((0, 0)))
    width = rng.randint(300, 1200)
    crop = crop.resize((width, max(1, round(crop.height * width / crop.width))), Image.Resampling.LANCZOS)
    crop = crop.filter(ImageFilter.GaussianBlur(rng.uniform(0.0, 0.9)))
    style = rng.choice(("colour", "grey", "binary"))
    if style == "grey":
        crop = crop.convert("L").convert("RGB")
    elif style == "binary":
        grey = np.asarray(crop.convert("L"))
        _, bw = cv2.threshold(grey, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
        crop = Image.fromarray(bw).convert("RGB")
    return crop


def zone_name(mrz: tuple[str, ...]) -> str:
    """The holder's name as the zone writes it ("SURNAME GIVEN NAMES"), which is all a zone-only image shows:
    the name field of line 1 (TD2, TD3, visas) or line 3 (TD1)."""
    field = mrz[2] if len(mrz) == 3 else mrz[0][5:]
    surname, _, given = field.partition("<<")
    return " ".join(f"{surname} {given}".replace("<", " ").split())


# What a condition applies to: "any" document, "mrz" documents only (it is put over the MRZ), or "one"
# document filling the capture (not the A4 photocopy of a card's two sides: a 512 px photo of that sheet leaves
# the card's name ~5 px tall and its dates ~4 px, below what a careful human reads, so the ground truth would
# no longer be what is on the picture).
Scope = Literal["any", "mrz", "one"]

# ------------------------------------------------------------------------------------ a zone in any direction


def _page_colour(img: Image.Image) -> tuple[int, int, int]:
    """The page's plain paper colour: the brightest common tone of its pixels (its background print)."""
    a = np.asarray(img.convert("RGB")).reshape(-1, 3)
    bright = a[a.sum(axis=1) >= np.percentile(a.sum(axis=1), 60)]
    return tuple(int(v) for v in np.median(bright, axis=0))


def zone_rot90(r: Rendered, rng: random.Random) -> Image.Image:
    """A booklet page whose machine-readable zone runs at 90° to its printed text (`zone_beside`), turned either
    way, scaled by 0.75-1.0."""
    return zone_beside(r, rng.choice((90, 270)), rng.uniform(0.75, 1.0), rng.randint(10, 40))


def zone_beside(r: Rendered, degrees: int, scale: float, gap: int) -> Image.Image:
    """The page above the zone kept upright (so it, not the zone, sets the page's direction) and the zone's
    band, turned `degrees` counter-clockwise and scaled by `scale`, standing `gap` px beside it on the same
    paper, as on booklet pages printed across their zone."""
    img = r.image.convert("RGB")
    line_h = r.mrz_boxes[0][3] - r.mrz_boxes[0][1]
    cut = max(0, r.mrz_boxes[0][1] - round(0.8 * line_h))
    top = img.crop((0, 0, img.width, cut))
    band = img.crop((0, cut, img.width, img.height)).rotate(degrees, expand=True)
    scale = min(scale, (top.width + band.width) / band.height)  # landscape stays landscape
    band = band.resize((round(band.width * scale), round(band.height * scale)), Image.Resampling.LANCZOS)
    height = max(top.height, band.height)
    out = Image.new("RGB", (top.width + gap + band.width, height), _page_colour(top))
    out.paste(top, (0, 0))
    out.paste(band, (top.width + gap, (height - band.height) // 2))
    return out


def crosshair(r: Rendered, rng: random.Random) -> Image.Image:
    """A camera preview saved with its overlay: a guide frame drawn round the zone (its edges may run through the
    first and last lines) and crosshair lines across the whole picture, one vertical through the zone's data and
    one horizontal through the zone; 2-3 px strokes of one colour, thin enough that every character stays
    readable to a person. Half the time the vertical line runs through a digit of the expiry date."""
    img = r.image.convert("RGB").copy()
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = _mrz_band(r)
    colour = rng.choice(((230, 40, 40), (40, 170, 60), (30, 90, 220), (20, 20, 20), (240, 200, 0)))
    width = rng.randint(2, 3)
    line_h = r.mrz_boxes[0][3] - r.mrz_boxes[0][1]
    inset = rng.uniform(-0.6, 0.5) * line_h  # >0: the frame's edges cross the first and last lines
    draw.rectangle((x0 - rng.randint(5, 30), y0 + inset, x1 + rng.randint(5, 30), y1 - inset), outline=colour,
                   width=width)
    cx = _through_expiry(r, rng) if rng.random() < 0.5 else rng.uniform(x0, x1)
    cy = rng.uniform(y0 + 0.3 * (y1 - y0), y1 - 0.3 * (y1 - y0))
    draw.line((cx, 0, cx, img.height), fill=colour, width=width)
    draw.line((0, cy, img.width, cy), fill=colour, width=width)
    return img


def _through_expiry(r: Rendered, rng: random.Random) -> float:
    """An x through one of the expiry date's six digits on the zone's second line (characters 9-14 of a TD1's,
    22-27 of every other layout's)."""
    left, _, right, _ = r.mrz_boxes[1]
    line = r.mrz[1]
    start = 8 if len(r.mrz) == 3 else 21
    char_w = (right - left) / len(line)
    return left + char_w * (start + rng.randrange(6) + rng.uniform(0.3, 0.7))


# ------------------------------------------------------------------------ the printed zone absent or unread
# Real captures often show a zone a reader reads while the printed zone beside it says nothing: a specimen's
# callouts and stamps over the printed fields, a reader's infrared image (most inks vanish, the zone's carbon
# print stays), a lamp's glare on the laminate over the names. The holder's name is then what the zone writes
# (`zone_name`), as on a zone-only strip.

_CALLOUTS = ("1 Surname", "2 Given names", "Document number", "Holder's portrait", "Security thread",
             "Optically variable ink", "Laser engraving", "Date of expiry", "Ghost image", "Microprint",
             "Personal data", "Tactile feature")
_STAMP_WORDS = ("CANCELLED", "VOID", "ANNULÉ", "ENTRY", "DEPARTED", "SPECIMEN", "ADMITTED", "EXIT")


def _printed_region(r: Rendered) -> tuple[int, int, int, int]:
    """The printed fields beside the portrait and above the zone (names, number, dates on every layout)."""
    w, h = r.image.size
    _, zone_top, _, _ = _mrz_band(r)
    top = round(0.09 * h)
    return (round(0.25 * w), top, round(0.97 * w), max(top + 20, zone_top - round(0.035 * h)))


def _callouts(img: Image.Image, box: tuple[int, int, int, int], rng: random.Random) -> None:
    """Label boxes tiling `box` edge to edge (each opaque, a caption inside, a leader line to the left)."""
    draw = ImageDraw.Draw(img)
    x0, y0, x1, y1 = box
    rows = rng.randint(2, 4)
    fill = rng.choice(((255, 255, 255), (255, 246, 196), (222, 236, 255), (40, 70, 140)))
    ink = (20, 20, 20) if sum(fill) > 400 else (255, 255, 255)
    f = font("sans_bold", max(14, (y1 - y0) // (rows * 3)))
    for i in range(rows):
        top, bottom = y0 + (y1 - y0) * i // rows, y0 + (y1 - y0) * (i + 1) // rows + 2
        left = x0 - rng.randint(0, 20)
        draw.rounded_rectangle((left, top, x1, bottom), radius=8, fill=fill, outline=(200, 40, 40), width=3)
        draw.text((left + 14, top + (bottom - top) // 3), rng.choice(_CALLOUTS), font=f, fill=ink)
        draw.line((left, (top + bottom) // 2, left - rng.randint(20, 60), (top + bottom) // 2 + rng.randint(-30, 30)),
                  fill=(200, 40, 40), width=3)


def _stamps(img: Image.Image, box: tuple[int, int, int, int], rng: random.Random) -> Image.Image:
    """Ink wash and border stamps over `box`: an opaque ink pad smear under 1-3 stamps with their words."""
    x0, y0, x1, y1 = box
    ink = rng.choice(((150, 30, 40), (30, 50, 150), (40, 110, 60), (90, 40, 120)))
    layer = Image.new("RGB", img.size, ink)
    mask = Image.new("L", img.size, 0)
    draw = ImageDraw.Draw(mask)
    draw.rectangle(box, fill=rng.randint(215, 240))  # the smudged pad: text under it is lost
    out = Image.composite(layer, img, mask.filter(ImageFilter.GaussianBlur(4)))
    draw = ImageDraw.Draw(out)
    for _ in range(rng.randint(1, 3)):
        cx, cy = rng.uniform(x0, x1), rng.uniform(y0, y1)
        rad = rng.uniform(0.25, 0.45) * (y1 - y0)
        draw.ellipse((cx - rad, cy - rad, cx + rad, cy + rad), outline=(245, 245, 240), width=4)
        draw.text((cx - rad * 0.8, cy - rad * 0.15), rng.choice(_STAMP_WORDS), font=font("sans_bold", max(12, int(rad / 3))),
                  fill=(245, 245, 240))
    return out


def _specimen_words(img: Image.Image, box: tuple[int, int, int, int], rng: random.Random) -> Image.Image:
    """A large "SPECIMEN"-like word printed over `box` three to four times, thick and opaque enough that the
    fields under it are lost."""
    x0, y0, x1, y1 = box
    word = rng.choice(("SPECIMEN", "MUSTER", "SPÉCIMEN", "SAMPLE", "ESPÉCIMEN"))
    colour = rng.choice(((210, 30, 30), (30, 30, 30), (20, 60, 170)))
    layer = Image.new("L", (x1 - x0, y1 - y0), 0)
    draw = ImageDraw.Draw(layer)
    rows = rng.randint(3, 4)
    size = max(18, (y1 - y0) // rows)
    f = font("sans_bold", size)
    for i in range(rows):
        draw.text((rng.randint(-40, 0), i * (y1 - y0) // rows - size // 6), (word + " ") * 4, font=f, fill=255,
                  stroke_width=max(2, size // 7), stroke_fill=255)
    layer = layer.rotate(rng.uniform(-4, 4), resample=Image.Resampling.BILINEAR)
    mask = Image.new("L", img.size, 0)
    mask.paste(layer, (x0, y0))
    return Image.composite(Image.new("RGB", img.size, colour), img, mask)


def printed_covered(r: Rendered, rng: random.Random) -> Image.Image:
    """A specimen as issuers and vendors publish it: callout boxes, ink stamps or a "SPECIMEN" word over the
    printed fields (the zone left clear), sometimes then photographed; the printed name is lost."""
    img = r.image.convert("RGB").copy()
    box = _printed_region(r)
    style = rng.choice(("callouts", "stamps", "specimen"))
    if style == "callouts":
        _callouts(img, box, rng)
    elif style == "stamps":
        img = _stamps(img, box, rng)
    else:
        img = _specimen_words(img, box, rng)
    return C.photo(img, rng, max_deg=4, min_deg=1) if rng.random() < 0.3 else img


def infrared(r: Rendered, rng: random.Random) -> Image.Image:
    """A document reader's infrared image: grey, the page's inks faded to 1-6 % of their contrast while the
    zone's carbon print and the portrait stay dark, the flat light of the reader's glass with a falloff at the
    edges, sensor noise, stored at 900-1400 px."""
    grey = _array(r.image).mean(axis=2)
    h, w = grey.shape
    keep = np.zeros((h, w), np.float32)
    x0, y0, x1, y1 = _mrz_band(r)
    pad = round(0.6 * (r.mrz_boxes[0][3] - r.mrz_boxes[0][1])) if r.mrz_boxes else 10
    keep[max(0, y0 - pad):y1 + pad, max(0, x0 - pad):x1 + pad] = 1.0
    keep = cv2.GaussianBlur(keep, (0, 0), 3)
    fade = rng.uniform(0.01, 0.06)
    paper = rng.uniform(170, 215)
    a = paper - (255 - grey) * (fade + (rng.uniform(0.75, 0.95) - fade) * keep) * paper / 255
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    falloff = 1 - rng.uniform(0.1, 0.25) * (((xx / w - 0.5) ** 2 + (yy / h - 0.5) ** 2) * 2)
    g = np.random.default_rng(rng.getrandbits(64))
    a = a * falloff + g.normal(0, rng.uniform(2, 5), (h, w)).astype(np.float32)
    img = Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "L").convert("RGB")
    return C.small(img.filter(ImageFilter.GaussianBlur(rng.uniform(0.3, 0.8))), rng, long_edge=rng.randint(900, 1400))


def glare_printed(r: Rendered, rng: random.Random) -> Image.Image:
    """A lamp's glare over the printed fields (the laminate over the names), washing them out to 2-8 % of
    their contrast; the zone outside the glare; photographed at a slight angle."""
    a = _array(r.image)
    h, w = a.shape[:2]
    x0, y0, x1, y1 = _printed_region(r)
    inside = np.zeros((h, w), np.float32)
    inside[y0:y1, x0:x1] = 1.0
    wash = cv2.GaussianBlur(inside, (0, 0), rng.uniform(8, 16))
    for _ in range(rng.randint(1, 2)):  # a brighter core, off centre
        wash = np.maximum(wash, _gauss_spot(h, w, rng.uniform(x0, x1), rng.uniform(y0, y1), 0.2 * w, 0.1 * h,
                                            rng.uniform(-0.4, 0.4)) * inside)
    strength = rng.uniform(0.92, 0.98)
    a = a * (1 - strength * wash[..., None]) + 255 * strength * wash[..., None]
    return C.photo(_image(a), rng, max_deg=4, min_deg=1)


def scan600(r: Rendered, rng: random.Random) -> Image.Image:
    """A desktop scan stored at 560-640 px long edge, grey half the time, at JPEG quality 60 (the file's): the
    printed name ~12 px tall."""
    img = C.small(r.image.convert("RGB"), rng, long_edge=rng.randint(560, 640))
    img = img.convert("L").convert("RGB") if rng.random() < 0.5 else img
    return C.jpeg_roundtrip(img, rng, quality=60)


def booklet_spread(r: Rendered, rng: random.Random) -> Image.Image:
    """The open booklet: the data page beside its facing page (a visa page with entry stamps), scanned or
    photographed as one picture of 1400-2000 px."""
    page = r.image.convert("RGB")
    w, h = page.size
    facing = Image.new("RGB", (w, h), _page_colour(page))
    draw = ImageDraw.Draw(facing)
    for _ in range(rng.randint(1, 4)):
        cx, cy, rad = rng.uniform(0.2, 0.8) * w, rng.uniform(0.2, 0.8) * h, rng.uniform(0.08, 0.14) * w
        ink = rng.choice(((150, 30, 40), (30, 50, 150), (40, 110, 60)))
        draw.rounded_rectangle((cx - rad, cy - rad * 0.6, cx + rad, cy + rad * 0.6), radius=12, outline=ink, width=4)
        draw.text((cx - rad * 0.8, cy - rad * 0.2), rng.choice(_STAMP_WORDS), font=font("sans_bold", int(rad / 4)),
                  fill=ink)
    gutter = rng.randint(6, 20)
    spread = Image.new("RGB", (2 * w + gutter, h), (120, 110, 100))
    left_first = rng.random() < 0.5
    spread.paste(facing if left_first else page, (0, 0))
    spread.paste(page if left_first else facing, (w + gutter, 0))
    if rng.random() < 0.5:
        spread = C.photo(spread, rng, max_deg=3, min_deg=0.5)
    return C.small(spread, rng, long_edge=rng.randint(1400, 2000))


# Conditions a hard set holds only when `--conditions` names them: every other one is in the default set, whose
# contents per seed do not change when an opt-in condition is added.
OPT_IN = frozenset({"thumbnail", "zone_rot90", "crosshair", "printed_covered", "infrared", "glare_printed", "scan600",
                    "booklet_spread"})
# Conditions whose picture shows the holder's name only as the zone writes it (`zone_name`): the truth is that.
ZONE_NAME_ONLY = frozenset({"mrz_strip", "printed_covered", "infrared", "glare_printed"})

# name -> (condition, container, quality, scope)
HARD_CONDITIONS: dict[str, tuple[HardCondition, str, int, Scope]] = {
    "watermark": (watermark, "jpeg", 88, "any"),
    "glare": (glare, "jpeg", 85, "mrz"),
    "hologram": (hologram, "jpeg", 85, "mrz"),
    "dark_phone": (dark_phone, "jpeg", 80, "any"),
    "phone512": (phone512, "jpeg", 85, "one"),
    "motion_blur": (motion_blur, "jpeg", 88, "any"),
    "jpeg15": (jpeg15, "jpeg", 15, "any"),
    "moire": (moire, "jpeg", 85, "any"),
    "occlusion": (occlusion, "jpeg", 88, "mrz"),
    "hard_rot90": (rotated(90), "jpeg", 85, "any"),
    "hard_rot180": (rotated(180), "jpeg", 85, "any"),
    "hard_rot270": (rotated(270), "jpeg", 85, "any"),
    "mrz_strip": (mrz_strip, "jpeg", 80, "mrz"),
    "thumbnail": (thumbnail, "jpeg", 85, "one"),
    "zone_rot90": (zone_rot90, "jpeg", 88, "mrz"),
    "crosshair": (crosshair, "jpeg", 88, "mrz"),
    "printed_covered": (printed_covered, "jpeg", 88, "mrz"),
    "infrared": (infrared, "jpeg", 85, "mrz"),
    "glare_printed": (glare_printed, "jpeg", 85, "mrz"),
    "scan600": (scan600, "jpeg", 60, "one"),
    "booklet_spread": (booklet_spread, "jpeg", 85, "mrz"),
}
