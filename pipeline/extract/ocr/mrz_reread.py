"""A second, targeted reading of the machine-readable zone, for pages whose first reading left an MRZ field
unreadable or failed a check digit.

Why a second reading helps: the first pass reads the whole page at one scale and one contrast. Glare,
hologram foil, watermarks, underexposure or a 512 px capture leave the MRZ detected (its boxes are there)
but a line garbled or missed. The zone has a known shape (2-3 equal-length lines of monospace text, rich
in `<`), so it can be cut out precisely, straightened from its own geometry, upscaled to a fixed text
height, contrast-normalised in a few ways and re-recognised line by line with the recognition model alone.

Why it cannot invent: the lines read here go through exactly the same decoder as the first pass
(`read_document` -> `mrz.find`: two check digits at least, layout checks, cross-checks with the printed
zone), and the caller keeps the new reading only when it is better by those checks. A line that reads
differently under every variant (an occluded one) simply does not check out and stays unreadable.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import cv2
import numpy as np

from pipeline.formats.document import OcrLine


class Recognised(NamedTuple):
    """One line image recognised: its text, score and the probability of each character (empty when the
    recogniser gave not one per character), as a first-pass box has them, so a re-read line is judged by the
    same rules."""

    text: str
    score: float
    char_scores: tuple[float, ...] = ()


Recognise = Callable[[np.ndarray], Recognised]  # one BGR line image -> what it reads

_LONGEST_LINE = 44  # characters in a TD3 / MRV-A line
ROW_HEIGHT = 64  # px: each line strip is warped to this height (the recogniser's input is 48 px high)
_MARGIN = 0.35  # of a line height, above and below the text in a strip
_TALL = 4.0  # a box this many times as tall as wide holds a line running down the page


def is_mrz_like(text: str) -> bool:
    """A box that holds (part of) an MRZ line: several fillers, or a long upper-case run with digits in it
    (a data line whose fillers were read as letters; printed headings have no digits)."""
    t = "".join(text.split()).upper()
    if len(t) < 8:
        return False
    fillers = sum(c in "<«‹(" for c in t)
    plain = sum(c.isascii() and (c.isupper() or c.isdigit()) for c in t)
    digits = sum(c.isdigit() for c in t)
    return fillers >= 2 or (len(t) >= 20 and plain >= 0.9 * len(t) and digits >= 4)


@dataclass(frozen=True, slots=True)
class Row:
    """One MRZ line to re-read: its centre line in page coordinates, angle (radians) and height."""

    cx: float
    cy: float
    angle: float
    height: float
    half_width: float

    @property
    def box(self) -> tuple[tuple[float, float], ...]:
        """Corners (top-left, top-right, bottom-right, bottom-left) in page coordinates, as OCR boxes are."""
        c, s = math.cos(self.angle), math.sin(self.angle)
        return tuple((self.cx + u * c - v * s, self.cy + u * s + v * c)
                     for u, v in ((-self.half_width, -self.height / 2), (self.half_width, -self.height / 2),
                                  (self.half_width, self.height / 2), (-self.half_width, self.height / 2)))


def _angle(line: OcrLine) -> float:
    (x0, y0), (x1, y1) = line.box[0], line.box[1]
    return math.atan2(y1 - y0, x1 - x0)


def _box_height(line: OcrLine) -> float:
    p = line.box
    return (math.dist(p[0], p[3]) + math.dist(p[1], p[2])) / 2


def locate_rows(lines: Sequence[OcrLine]) -> list[Row]:
    """The MRZ lines' geometry, from the first pass's line boxes; lines it missed are predicted one line
    pitch above and below the detected ones (the name line is the one glare or a box most often hides).

    Works in the band's own frame (rotated by the band's median angle), so skew and mild perspective are
    taken from the zone itself; all MRZ lines share one left and right edge, so every row gets the band's
    full width even when the first pass found only a fragment of it.
    """
    boxes = [x for x in lines if is_mrz_like(x.text)]
    if not boxes:
        return []
    angle = float(np.median([_angle(b) for b in boxes]))
    c, s = math.cos(angle), math.sin(angle)

    def to_band(p: tuple[float, float]) -> tuple[float, float]:
        return p[0] * c + p[1] * s, -p[0] * s + p[1] * c

    def to_page(u: float, v: float) -> tuple[float, float]:
        return u * c - v * s, u * s + v * c

    height = float(np.median([_box_height(b) for b in boxes]))
    pts = [to_band(p) for b in boxes for p in b.box]
    u0, u1 = min(p[0] for p in pts), max(p[0] for p in pts)
    # only fragments found (the first pass cut a line where a box crossed it): OCR-B is monospaced, so the
    # longest box gives the character width; widen the band both ways to a full 44-character line
    longest = max(boxes, key=lambda b: b.right - b.left)
    char_width = math.dist(longest.box[0], longest.box[1]) / max(len("".join(longest.text.split())), 1)
    missing = _LONGEST_LINE * char_width - (u1 - u0)
    if missing > 0:
        u0, u1 = u0 - missing, u1 + missing
    # group boxes into rows by their centre in the band frame
    centres = sorted(((float(np.mean([to_band(p)[1] for p in b.box])), b) for b in boxes), key=lambda vb: vb[0])
    rows: list[list[float]] = []
    for v, _ in centres:
        if rows and v - rows[-1][-1] < 0.6 * height:
            rows[-1].append(v)
        else:
            rows.append([v])
    vs = [float(np.mean(r)) for r in rows]
    pitch = float(np.median(np.diff(vs))) if len(vs) > 1 else 1.75 * height
    if len(vs) < 3:
        vs = [vs[0] - pitch] + vs + [vs[-1] + pitch]
    half = (u1 - u0) / 2 + 0.8 * height
    out = []
    for v in vs:
        cx, cy = to_page((u0 + u1) / 2, v)
        out.append(Row(cx, cy, angle, height, half))
    return out


def locate_rows_by_shape(pixels: np.ndarray) -> list[Row]:
    """MRZ-shaped lines found in the pixels when the first pass found no MRZ box at all (a box drawn across
    the zone, heavy glare): long, thin, evenly dense runs of dark characters, found by the classic
    black-hat + horizontal gradient + closing recipe; the four lowest such blobs of the page (an MRZ has
    at most three lines, a box drawn round it may add one; `refine` and the decoder sort them out)."""
    h, w = pixels.shape[:2]
    scale = min(1.0, 1000 / max(h, w))
    gray = cv2.cvtColor(cv2.resize(pixels, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA),
                        cv2.COLOR_RGB2GRAY)
    sw = gray.shape[1]
    grad = np.abs(cv2.Sobel(_ink(gray), cv2.CV_32F, 1, 0, ksize=3))
    grad = (255 * grad / max(float(grad.max()), 1.0)).astype(np.uint8)
    grad = cv2.morphologyEx(grad, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (max(9, sw // 25), 1)))
    _, mask = cv2.threshold(grad, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    mask = cv2.morphologyEx(mask, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (1, 3)))
    contours, _ = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    found = []
    for contour in contours:
        (cx, cy), (rw, rh), deg = cv2.minAreaRect(contour)
        if rw < rh:
            rw, rh, deg = rh, rw, deg + 90
        deg = (deg + 90) % 180 - 90
        if rw >= 0.5 * sw and rw >= 12 * rh and rh >= 4 and abs(deg) < 20:
            found.append(Row(cx / scale, cy / scale, math.radians(deg), rh / scale, rw / scale / 2 + rh / scale))
    found = sorted(found, key=lambda r: r.cy)[-4:]  # 3 lines at most, and maybe the edge of a drawn box
    if not found:
        return []
    # MRZ lines share their left and right edges: give every line the union's extent
    left = min(r.cx - r.half_width for r in found)
    right = max(r.cx + r.half_width for r in found)
    return [Row((left + right) / 2, r.cy, r.angle, r.height, (right - left) / 2) for r in found]


def strip(pixels: np.ndarray, row: Row, margin: float = _MARGIN) -> np.ndarray:
    """The row cut out of the page (RGB), straightened and scaled so its text is a fixed height."""
    out_h = ROW_HEIGHT
    scale = out_h / (row.height * (1 + 2 * margin))
    out_w = max(int(2 * row.half_width * scale), out_h)
    m = cv2.getRotationMatrix2D((row.cx, row.cy), math.degrees(row.angle), scale)
    m[0, 2] += out_w / 2 - row.cx
    m[1, 2] += out_h / 2 - row.cy
    return cv2.warpAffine(pixels, m, (out_w, out_h), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REPLICATE)


def _ink(gray: np.ndarray) -> np.ndarray:
    """Dark print against its local background, with long horizontal rules (drawn boxes) removed."""
    blackhat = cv2.morphologyEx(gray, cv2.MORPH_BLACKHAT, cv2.getStructuringElement(cv2.MORPH_RECT, (15, 7)))
    width = max(gray.shape[1] // 8, 3)
    rules = cv2.morphologyEx(blackhat, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (width, 1)))
    return cv2.subtract(blackhat, rules)


def refine(pixels: np.ndarray, row: Row, *, max_growth: float = 2.5) -> Row:
    """Re-centre a row on its ink: the row is cut with generous margins, and the band of text rows around
    the centre (rows with at least a sixth of the peak ink) gives the line's true centre and height.
    Predicted rows and shape-found rows are approximate; a strip cut off-centre reads badly. A row whose
    height is known from detected boxes may grow by `max_growth` at most; a shape-found one more."""
    window = strip(pixels, row, margin=2.0)  # 5 line heights tall
    profile = _ink(cv2.cvtColor(window, cv2.COLOR_RGB2GRAY)).astype(np.float32).sum(axis=1)
    profile = np.convolve(profile, np.ones(3) / 3, mode="same")
    if profile.max() <= 0:
        return row
    on = profile >= profile.max() / 6
    gaps = np.flatnonzero(~on)  # bridge gaps of up to 3 rows (a rule removed across the text leaves one)
    for i in gaps:
        if on[max(i - 3, 0):i].any() and on[i + 1:i + 4].any():
            on[i] = True
    centre = len(profile) // 2
    near = np.flatnonzero(on)
    start = stop = int(near[np.argmin(np.abs(near - centre))])
    while start > 0 and on[start - 1]:
        start -= 1
    while stop < len(on) - 1 and on[stop + 1]:
        stop += 1
    px_per_unit = len(profile) / (row.height * 5)
    offset = ((start + stop) / 2 - centre) / px_per_unit
    height = max((stop - start + 1) / px_per_unit, 0.5 * row.height)
    if height > max_growth * row.height:  # merged with a neighbour (a stamp, the next line): keep the old geometry
        return row
    dx, dy = -math.sin(row.angle) * offset, math.cos(row.angle) * offset
    return Row(row.cx + dx, row.cy + dy, row.angle, height, row.half_width)


def _clahe(gray: np.ndarray) -> np.ndarray:
    return cv2.createCLAHE(clipLimit=2.5, tileGridSize=(2, 16)).apply(gray)


def _flatten(gray: np.ndarray) -> np.ndarray:
    """Divide out the slowly varying background (glare, vignetting, a dark exposure): print stays dark,
    a bright spot stops being bright."""
    k = max(3, ROW_HEIGHT | 1)
    background = cv2.morphologyEx(gray, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    flat = cv2.divide(gray, np.maximum(background, 1), scale=255)
    return flat


def _without_rules(gray: np.ndarray) -> np.ndarray:
    """Long horizontal rules (a box drawn round the zone, a printed line) painted out of the strip."""
    ink = cv2.morphologyEx(gray, cv2.MORPH_BLACKHAT, cv2.getStructuringElement(cv2.MORPH_RECT, (15, 15)))
    _, dark = cv2.threshold(ink, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    rules = cv2.morphologyEx(dark, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (gray.shape[1] // 2, 1)))
    if not rules.any():
        return gray
    return cv2.inpaint(gray, cv2.dilate(rules, np.ones((3, 3), np.uint8)), 3, cv2.INPAINT_TELEA)


_EDGE_ROWS = 8  # of a strip's 64: the margins above and below the text, which no character reaches


def vertical_rules(gray: np.ndarray) -> np.ndarray:
    """A mask of the thin lines that cross a strip from top to bottom (a camera preview's crosshair, the sides
    of a guide frame): columns dark in both margins and in nearly every row between, at most 6 px wide.
    A character never reaches the margins, so no character alone is taken for a rule."""
    ink = cv2.morphologyEx(gray, cv2.MORPH_BLACKHAT, cv2.getStructuringElement(cv2.MORPH_RECT, (15, 15)))
    _, dark = cv2.threshold(ink, 0, 255, cv2.THRESH_BINARY | cv2.THRESH_OTSU)
    dark = dark > 0
    edges = np.vstack([dark[:_EDGE_ROWS], dark[-_EDGE_ROWS:]])
    ruled = (edges.mean(axis=0) >= 0.9) & (dark.mean(axis=0) >= 0.9)
    mask = np.zeros_like(gray)
    start = None
    for x, on in enumerate([*ruled, False]):
        if on and start is None:
            start = x
        elif not on and start is not None:
            if x - start <= 6:
                mask[:, max(start - 1, 0):x + 1] = 255
            start = None
    return mask


def without_vertical_rules(rgb: np.ndarray) -> np.ndarray | None:
    """The strip (BGR, contrast-normalised) with its vertical rules painted out, or None when it has none."""
    gray = _flatten(cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY))
    mask = vertical_rules(gray)
    if not mask.any():
        return None
    painted = cv2.inpaint(_without_rules(gray), mask, 3, cv2.INPAINT_TELEA)
    return cv2.cvtColor(_clahe(painted), cv2.COLOR_GRAY2BGR)


def variants(rgb: np.ndarray) -> dict[str, np.ndarray]:
    """Contrast-normalised versions of one strip (BGR, what the recogniser expects).

    gray+CLAHE for low contrast and darkness; background flattening for glare; the max channel for
    coloured foil and guilloche (ink is dark in every channel, a rainbow or tint is bright in one); rules
    painted out for a box drawn across the lines.
    """
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    maxc = rgb.max(axis=2)
    out = {
        "clahe": _clahe(gray),
        "flat": _clahe(_flatten(gray)),
        "maxc": _clahe(_flatten(maxc)),
        "norule": _clahe(_without_rules(gray)),
    }
    return {k: cv2.cvtColor(v, cv2.COLOR_GRAY2BGR) for k, v in out.items()}


@dataclass(frozen=True, slots=True)
class Reading:
    """One way of re-reading the zone: an OCR line per row, in row order. `turn` is how often the page was
    turned by 90° counter-clockwise (`np.rot90`) to read the zone upright (0, 1 or 3); a turned zone's boxes are
    in the turned page's coordinates, and `region` is its bounding box (left, top, right, bottom) in the page's."""

    name: str
    lines: list[OcrLine]
    turn: int = 0
    region: tuple[float, float, float, float] | None = None


def _refined(pixels: np.ndarray, found: list[Row], max_growth: float) -> list[Row]:
    rows: list[Row] = []
    width = pixels.shape[1]
    for row in found:
        left, right = max(row.cx - row.half_width, 0.0), min(row.cx + row.half_width, float(width))
        row = Row((left + right) / 2, row.cy, row.angle, row.height, (right - left) / 2)  # inside the page
        row = refine(pixels, refine(pixels, row, max_growth=max_growth), max_growth=max_growth)
        if all(abs(row.cy - r.cy) > 0.5 * min(row.height, r.height) for r in rows):  # two snapped onto one line
            rows.append(row)
    return rows


def reread(pixels: np.ndarray, first_pass: Sequence[OcrLine], recognise: Recognise) -> list[Reading]:
    """Alternative readings of the MRZ lines: one per contrast variant and one by per-row vote across
    variants (the text most variants agree on, ties broken by score). Empty when no MRZ-like box exists."""
    from_boxes = locate_rows(first_pass)
    rows = _refined(pixels, from_boxes, 1.4) if from_boxes else _refined(pixels, locate_rows_by_shape(pixels), 2.5)
    return list(_read_rows(pixels, rows, recognise))


def _read_rows(pixels: np.ndarray, rows: list[Row], recognise: Recognise) -> Iterator[Reading]:
    """One reading per contrast variant, each as soon as its rows are recognised, then the per-row vote, then
    the reading without a crosshair where one crosses the zone: a caller that has what it needs stops
    recognising. Each row is cut out once and its variants made once, for all of them."""
    if not rows:
        return
    cut = [strip(pixels, row) for row in rows]
    strips = [variants(c) for c in cut]
    per_row: list[list[tuple[str, float]]] = [[] for _ in rows]
    for name in strips[0]:
        found = []
        for i, row in enumerate(rows):
            read = recognise(strips[i][name])
            if read.text:
                found.append(OcrLine(read.text, read.score, row.box, read.char_scores))
                per_row[i].append(read)
        yield Reading(name, found)
    voted = []
    for row, reads in zip(rows, per_row):
        if not reads:
            continue
        counts = Counter(r.text for r in reads)
        best = max(reads, key=lambda r: (counts[r.text], r.score))
        voted.append(OcrLine(best.text, best.score * counts[best.text] / len(reads), row.box, best.char_scores))
    yield Reading("vote", voted)
    yield from _without_crosshair(rows, cut, strips, recognise)


def _without_crosshair(rows: list[Row], cut: list[np.ndarray], strips: list[dict[str, np.ndarray]],
                       recognise: Recognise) -> Iterator[Reading]:
    """One more reading where a line crosses the zone from top to bottom (a crosshair, a guide frame's side),
    with the lines painted out of every strip they cross (`cut`: each row's strip) and the `flat` variant of
    the others (`strips`); nothing where no line crosses. Not in the vote: a painted line may take a stroke of
    the character under it, which the check digits then refute."""
    painted = [without_vertical_rules(c) for c in cut]
    if all(p is None for p in painted):
        return
    found = []
    for row, image, variant in zip(rows, painted, strips):
        read = recognise(image if image is not None else variant["flat"])
        if read.text:
            found.append(OcrLine(read.text, read.score, row.box, read.char_scores))
    yield Reading("nocross", found)


# ------------------------------------------------------------------------------------ a zone at 90° to the page


def reread_turned(pixels: np.ndarray, recognise: Recognise) -> Iterator[Reading]:
    """Readings of a zone that runs at 90° to the page's text (a booklet page printed across its zone: the
    printed text sets the page's direction, so the prepare stage leaves the zone vertical).

    The page is turned 90° both ways and the zone-shaped band searched on each (`locate_rows_by_shape`: long,
    thin, evenly dense runs of characters; the page's own text, vertical once turned, is not such a run). The
    longest such row is recognised once per turn (the two turns hold the same rows upside down to each other):
    only a turn where it reads as zone text is read further, the surer one if both do, like an upright zone.
    Empty when neither does (a page's edges and rules turned can look zone-shaped; they never read as zone
    text), so a page without a turned zone costs two shape searches and at most two recognitions. The
    decoder's check digits, not this choice, decide whether anything read here is kept. Lazy, variant by
    variant (`_read_rows`): each costs a recognition per row."""
    found = []
    for turn in (1, 3):
        turned = np.ascontiguousarray(np.rot90(pixels, turn))
        rows = _refined(turned, locate_rows_by_shape(turned), 2.5)
        if rows:
            probe = recognise(variants(strip(turned, max(rows, key=lambda r: r.half_width)))["clahe"])
            if is_mrz_like(probe.text):
                found.append((probe.score, turn, turned, rows))
    if not found:
        return iter(())
    _, turn, turned, rows = max(found, key=lambda f: f[0])
    region = _page_region(rows, turn, pixels.shape[:2])
    return (Reading(r.name, r.lines, turn, region) for r in _read_rows(turned, rows, recognise))


def sideways(first_pass: Sequence[OcrLine]) -> bool:
    """Whether the first pass read the zone's lines sideways: zone-like boxes, every one at least four times
    as tall as wide (the recogniser turns such crops upright and may read a zone at 90° to the page; its
    lines then stand side by side, where no zone format's layout looks for them)."""
    boxes = [x for x in first_pass if is_mrz_like(x.text)]
    return bool(boxes) and all(x.bottom - x.top >= _TALL * (x.right - x.left) for x in boxes)


def _page_region(rows: list[Row], turn: int, shape: tuple[int, ...]) -> tuple[float, float, float, float]:
    """The bounding box, in the page's coordinates, of rows found on the page turned `turn` times by 90° counter-
    clockwise (`np.rot90(page, turn)`, turn 1 or 3)."""
    height, width = shape[:2]
    points = [(width - 1 - y, x) if turn == 1 else (y, height - 1 - x) for row in rows for x, y in row.box]
    xs, ys = zip(*points)
    return min(xs), min(ys), max(xs), max(ys)


def page_lines(first_pass: Sequence[OcrLine], reading: Reading) -> list[OcrLine]:
    """The page's lines with a re-read zone in place of what the first pass read of it (`replace_mrz`). A zone
    read turned replaces every first-pass box inside its region (its lines read sideways), and its lines are
    laid out below the page's other text, in their own order and spacing, where the layout rules of every
    zone format expect a zone: their positions in the turned page mean nothing to the upright one."""
    if not reading.turn or reading.region is None:
        return replace_mrz(first_pass, reading.lines)
    left, top, right, bottom = reading.region
    kept = [x for x in first_pass
            if not (left <= (x.left + x.right) / 2 <= right and top <= x.middle <= bottom)]
    if not reading.lines:
        return kept
    zone_left = min(x.left for x in reading.lines)
    zone_top = min(x.top for x in reading.lines)
    below = max((x.bottom for x in kept), default=0.0) + max(x.height for x in reading.lines)
    page_left = min((x.left for x in kept), default=0.0)
    moved = [OcrLine(x.text, x.score, tuple((px - zone_left + page_left, py - zone_top + below) for px, py in x.box),
                     x.char_scores) for x in reading.lines]
    return kept + moved


def replace_mrz(first_pass: Sequence[OcrLine], mrz_lines: Sequence[OcrLine]) -> list[OcrLine]:
    """The page's lines with the first pass's MRZ boxes swapped for re-read ones: every first-pass box that looks
    like zone text, and every box whose middle lies on a re-read line (a fragment of that line, e.g. `CAN` the
    first pass read from `P<CANJANSEN<<...` above an occluder, would otherwise join the re-read line's row as a
    fourth name word)."""
    def on_a_reread_line(x: OcrLine) -> bool:
        return any(line.top <= x.middle <= line.bottom for line in mrz_lines)

    return [x for x in first_pass if not is_mrz_like(x.text) and not on_a_reread_line(x)] + list(mrz_lines)
