"""Train the MRZ glyph classifier (`pipeline/extract/ocr/mrz_glyphs.py`) on zone lines rendered here.

Lines of random zone text are drawn in OCR-B (Debian `fonts-ocr-b`) and DejaVu Sans Mono (the generator's zone
font), degraded as captures degrade them (scale down to 6 px capitals, stroke weight, camera shake, blur,
underexposure, noise, JPEG, contrast, a grey infrared-like background, a small tilt), and cut into cells by the
reader's own code (`mrz_reread.refine`/`strip`, `mrz_glyphs.line_cells`), so the classifier learns the cells exactly
as it will see them. A line whose cells the segmentation did not place on the drawn characters is left out (it would
teach wrong labels). The classifier is a two-layer perceptron trained with Adam in numpy; the seed makes the whole
run deterministic.

    python tools/train_mrz_glyphs.py --out pipeline/extract/ocr/models/mrz_glyphs.npz
    python tools/train_mrz_glyphs.py --evaluate-only   # the shipped model on freshly rendered lines
"""

from __future__ import annotations

import argparse
import hashlib
import io
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.extract.ocr import mrz_glyphs  # noqa: E402
from pipeline.extract.ocr.mrz_glyphs import ALPHABET, GlyphModel  # noqa: E402
from pipeline.extract.ocr.mrz_reread import _MARGIN, ROW_HEIGHT, Row, refine, strip  # noqa: E402
from synth.render import font_path  # noqa: E402

FONTS = {"ocrb": font_path("ocrb"), "dejavu_mono": font_path("mono")}  # the zone's typeface, the generator's
LENGTHS = (30, 36, 44)
_NAMES = ("ANNA", "MARIA", "ERIKSSON", "JOHN", "SMITH", "MUSTERMANN", "GABLER", "LI", "WANG", "XU", "QUINZE",
          "VOJTECH", "KOWALSKA", "YAMADA", "OZTURK", "JUZEF", "BAKKER", "DE", "VAN", "HUGO", "ZOE", "FJELL")


@dataclass(frozen=True)
class Drawn:
    """A rendered page with one zone line: the page (RGB), the row around the line as the reader would locate
    it, the line's text and each character's left edge on the page (drawn at a fixed advance)."""

    page: np.ndarray
    row: Row
    text: str
    lefts: np.ndarray
    angle: float


def random_text(rng: np.random.Generator, n: int) -> str:
    """A zone-like line: uniformly random symbols (every symbol seen often), or a name line (names, fillers)."""
    if rng.random() < 0.6:
        runs = []
        while sum(map(len, runs)) < n:
            runs.append("".join(rng.choice(list(ALPHABET[:36]), size=int(rng.integers(1, 8)))))
            runs.append("<" * int(rng.integers(0, 3)))
        return "".join(runs)[:n]
    prefix = "".join(rng.choice(list("PIACV"))) + rng.choice(["<", "D", "M"]) + \
        "".join(rng.choice(list(ALPHABET[:26]), size=3))
    words = ["".join(rng.choice(list(ALPHABET[:26]), size=int(rng.integers(2, 10)))) if rng.random() < 0.5
             else str(rng.choice(_NAMES)) for _ in range(int(rng.integers(2, 5)))]
    name = words[0] + "<<" + "<".join(words[1:])
    return (prefix + name + "<" * n)[:n]


def render(rng: np.random.Generator, font_path: str, text: str, text_px: float) -> Drawn:
    """`text` drawn on a page so its capitals are about `text_px` high, degraded, tilted a little."""
    ss = 3  # drawn at three times the size, then reduced (antialiasing as a scanner's optics)
    size = max(int(text_px * ss / 0.72), 8)
    font = ImageFont.truetype(font_path, size)
    advance = font.getlength("M")
    top_y, bottom_y = font.getbbox("M")[1], font.getbbox("M")[3]
    cap = bottom_y - top_y
    margin = int(6 * cap)
    w, h = int(advance * len(text) + 2 * margin), int(cap * 7)
    bg, ink = int(rng.integers(150, 256)), int(rng.integers(0, 110))
    if bg - ink < 50:
        ink = bg - 50
    img = Image.new("L", (w, h), bg)
    draw = ImageDraw.Draw(img)
    y0 = h // 2 - cap // 2 - top_y
    for dy in (-1.75, 1.75):  # neighbouring zone lines, as on a page
        if rng.random() < 0.6:
            other = random_text(rng, len(text))
            for i, c in enumerate(other):
                draw.text((margin + i * advance, y0 + dy * cap), c, font=font, fill=ink)
    for i, c in enumerate(text):
        draw.text((margin + i * advance, y0), c, font=font, fill=ink)
    arr = np.asarray(img, dtype=np.uint8)
    weight = rng.integers(-2, 3)  # stroke weight: thinner or bolder print
    if weight:
        k = np.ones((abs(int(weight)) + 1, abs(int(weight)) + 1), np.uint8)
        arr = cv2.dilate(arr, k) if weight > 0 else cv2.erode(arr, k)
    angle = float(rng.uniform(-2.5, 2.5))
    centre = (w / 2, h / 2)
    m = cv2.getRotationMatrix2D(centre, angle, 1.0)
    arr = cv2.warpAffine(arr, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=bg)
    scale = 1.0 / ss
    small = cv2.resize(arr, (max(int(w * scale), 8), max(int(h * scale), 8)), interpolation=cv2.INTER_AREA)
    small = _degrade(rng, small, cap * scale)
    page = cv2.cvtColor(small, cv2.COLOR_GRAY2RGB)
    if rng.random() < 0.3:  # a tint: coloured background, ink dark in every channel
        tint = rng.uniform(0.75, 1.0, size=3)
        page = np.clip(page * tint, 0, 255).astype(np.uint8)
    # where the line's characters are on the reduced page (the page was turned about its centre)
    rad = math.radians(-angle)  # cv2 turns counter-clockwise for a positive angle, in image coordinates
    cx_line = margin + advance * len(text) / 2
    cy_line = y0 + top_y + cap / 2
    c, s = math.cos(rad), math.sin(rad)

    def turned(x: float, y: float) -> tuple[float, float]:
        dx, dy = x - centre[0], y - centre[1]
        return ((centre[0] + dx * c - dy * s) * scale, (centre[1] + dx * s + dy * c) * scale)

    cx, cy = turned(cx_line, cy_line)
    lefts = np.array([turned(margin + i * advance, cy_line) for i in range(len(text))])
    row = Row(cx + rng.normal(0, 0.1 * cap * scale), cy + rng.normal(0, 0.15 * cap * scale),
              rad + math.radians(rng.normal(0, 0.3)), cap * scale * rng.uniform(1.1, 1.6),
              advance * scale * len(text) / 2 + cap * scale * rng.uniform(0.3, 2.0))
    return Drawn(page, row, text, lefts, rad)


def _degrade(rng: np.random.Generator, gray: np.ndarray, cap: float) -> np.ndarray:
    """Capture damage: an uneven background (infrared-like mottling, a light gradient), camera shake (a straight
    smear a fifth to half a capital long, at any angle), blur, underexposure, noise, JPEG. `cap`: the capitals'
    height in pixels."""
    h, w = gray.shape
    out = gray.astype(np.float32)
    if rng.random() < 0.3:
        out = cv2.filter2D(out, -1, _smear(float(rng.uniform(0.2, 0.5)) * cap, float(rng.uniform(0, 180))))
    if rng.random() < 0.2:  # an underexposed phone photo: the print's contrast cut to a quarter or so
        out *= rng.uniform(0.25, 0.45)
    if rng.random() < 0.5:
        gradient = np.linspace(rng.uniform(-40, 0), rng.uniform(0, 40), w)[None, :]
        out += gradient
    if rng.random() < 0.3:  # mottled grey, as an infrared capture's paper
        mottle = cv2.resize(rng.normal(0, 18, size=(max(h // 8, 2), max(w // 8, 2))).astype(np.float32), (w, h))
        out += mottle
    sigma = rng.uniform(0, 1.3)
    if sigma > 0.3:
        out = cv2.GaussianBlur(out, (0, 0), sigma)
    out += rng.normal(0, rng.uniform(0, 10), size=out.shape)
    out = np.clip(out, 0, 255).astype(np.uint8)
    if rng.random() < 0.6:
        buf = io.BytesIO()
        Image.fromarray(out).save(buf, format="JPEG", quality=int(rng.integers(30, 95)))
        out = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("L"))
    return out


def _smear(length: float, angle: float) -> np.ndarray:
    """A straight motion-blur kernel `length` pixels long (at least 2) at `angle` degrees."""
    size = max(int(math.ceil(length)) | 1, 3)
    kernel = np.zeros((size, size), np.float32)
    half = max(length, 2.0) / 2
    kernel[size // 2, int(round(size / 2 - half)):int(round(size / 2 + half))] = 1.0
    m = cv2.getRotationMatrix2D((size / 2 - 0.5, size / 2 - 0.5), angle, 1.0)
    kernel = cv2.warpAffine(kernel, m, (size, size))
    return kernel / max(float(kernel.sum()), 1e-6)


def strip_x(row: Row, point: tuple[float, float]) -> float:
    """A page point's x in the strip `mrz_reread.strip` cuts for `row` (its affine map, reproduced)."""
    scale = ROW_HEIGHT / (row.height * (1 + 2 * _MARGIN))
    out_w = max(int(2 * row.half_width * scale), ROW_HEIGHT)
    m = cv2.getRotationMatrix2D((row.cx, row.cy), math.degrees(row.angle), scale)
    m[0, 2] += out_w / 2 - row.cx
    return float(m[0, 0] * point[0] + m[0, 1] * point[1] + m[0, 2])


def cells_of(drawn: Drawn) -> tuple[np.ndarray, int] | None:
    """The drawn line's cells, cut as the reader cuts them; None when the segmentation missed the characters
    (any cell's left edge more than a quarter pitch from the drawn character's)."""
    row = refine(drawn.page, drawn.row, max_growth=1.4)
    ink = mrz_glyphs.ink_strip(strip(drawn.page, row))
    band = mrz_glyphs._text_band(ink)
    if band is None:
        return None
    n = len(drawn.text)
    grid = mrz_glyphs.cell_grid(ink, band, n)
    if grid is None:
        return None
    start, pitch = grid
    true_lefts = np.array([strip_x(row, tuple(p)) for p in drawn.lefts])
    if np.abs(start + pitch * np.arange(n) - true_lefts).max() > 0.25 * pitch:
        return None
    cut = mrz_glyphs.line_cells(ink, n)
    return cut


def dataset(seed: int, lines: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Cells and labels from `lines` rendered lines (all offsets of each cell); and how many lines the
    segmentation missed."""
    rng = np.random.default_rng(seed)
    xs, ys, missed = [], [], 0
    for k in range(lines):
        font = list(FONTS.values())[k % len(FONTS)]
        n = int(rng.choice(LENGTHS))
        drawn = render(rng, font, random_text(rng, n), float(rng.uniform(6, 42)))
        cut = cells_of(drawn)
        if cut is None:
            missed += 1
            continue
        cells, shifts = cut
        xs.append(cells.astype(np.float16))
        ys.append(np.repeat([ALPHABET.index(c) for c in drawn.text], shifts))
    return np.concatenate(xs), np.concatenate(ys), missed


def train(x: np.ndarray, y: np.ndarray, seed: int, hidden: int = 192, epochs: int = 5) -> GlyphModel:
    """A two-layer perceptron (ReLU, softmax) fitted by Adam on mini-batches, weight decay 1e-4; the learning
    rate halves each epoch of the second half."""
    rng = np.random.default_rng(seed)
    d, k = x.shape[1] * x.shape[2], len(ALPHABET)
    params = {"w1": rng.normal(0, math.sqrt(2 / d), (d, hidden)).astype(np.float32),
              "b1": np.zeros(hidden, np.float32),
              "w2": rng.normal(0, math.sqrt(2 / hidden), (hidden, k)).astype(np.float32),
              "b2": np.zeros(k, np.float32)}
    m = {n: np.zeros_like(p) for n, p in params.items()}
    v = {n: np.zeros_like(p) for n, p in params.items()}
    step, batch = 0, 512
    flat = x.reshape(len(x), -1)
    for epoch in range(epochs):
        lr = 2e-3 * (0.5 ** max(0, epoch + 1 - epochs // 2))
        order = rng.permutation(len(x))
        loss_sum = 0.0
        for i in range(0, len(order), batch):
            idx = order[i:i + batch]
            xb = flat[idx].astype(np.float32) - 0.5
            yb = y[idx]
            h = np.maximum(xb @ params["w1"] + params["b1"], 0)
            logits = h @ params["w2"] + params["b2"]
            logits -= logits.max(axis=1, keepdims=True)
            p = np.exp(logits)
            p /= p.sum(axis=1, keepdims=True)
            loss_sum += float(-np.log(p[np.arange(len(yb)), yb] + 1e-9).sum())
            g = p
            g[np.arange(len(yb)), yb] -= 1
            g /= len(yb)
            grads = {"w2": h.T @ g, "b2": g.sum(0)}
            gh = (g @ params["w2"].T) * (h > 0)
            grads["w1"] = xb.T @ gh
            grads["b1"] = gh.sum(0)
            step += 1
            for n in params:
                gn = grads[n] + 1e-4 * params[n]
                m[n] = 0.9 * m[n] + 0.1 * gn
                v[n] = 0.999 * v[n] + 0.001 * gn * gn
                mh = m[n] / (1 - 0.9 ** step)
                vh = v[n] / (1 - 0.999 ** step)
                params[n] -= (lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
        print(f"epoch {epoch + 1}: loss {loss_sum / len(x):.4f}", flush=True)
    return GlyphModel(params["w1"], params["b1"], params["w2"], params["b2"])


def evaluate(model: GlyphModel, seed: int, lines: int) -> dict[str, float]:
    """Characters and lines right on freshly rendered lines, read end to end (`mrz_glyphs.read_row`)."""
    rng = np.random.default_rng(seed)
    right = total = lines_right = unread = 0
    for k in range(lines):
        font = list(FONTS.values())[k % len(FONTS)]
        n = int(rng.choice(LENGTHS))
        drawn = render(rng, font, random_text(rng, n), float(rng.uniform(6, 42)))
        read = mrz_glyphs.read_strip(strip(drawn.page, refine(drawn.page, drawn.row, max_growth=1.4)), n,
                                     model=model)
        total += n
        if read is None:
            unread += 1
            continue
        hits = sum(a == b for a, b in zip(read.text, drawn.text))
        right += hits
        lines_right += hits == n
    return {"chars_right": right / total, "lines_right": lines_right / lines, "unsegmented": unread / lines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("pipeline/extract/ocr/models/mrz_glyphs.npz"))
    ap.add_argument("--lines", type=int, default=3600, help="rendered training lines")
    ap.add_argument("--seed", type=int, default=1729)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=192, help="hidden units")
    ap.add_argument("--evaluate-only", action="store_true", help="evaluate the shipped model and stop")
    args = ap.parse_args()
    if not args.evaluate_only:
        started = time.perf_counter()
        x, y, missed = dataset(args.seed, args.lines)
        print(f"{len(x)} cells from {args.lines - missed} lines ({missed} not segmented) in "
              f"{time.perf_counter() - started:.0f} s", flush=True)
        model = train(x, y, args.seed, hidden=args.hidden, epochs=args.epochs)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        model.save(args.out)
        digest = hashlib.sha256(args.out.read_bytes()).hexdigest()
        print(f"wrote {args.out}: {args.out.stat().st_size} bytes, sha256 {digest}")
    else:
        model = mrz_glyphs.shipped()
    print("held-out rendered lines:", evaluate(model, args.seed + 1, 300))


if __name__ == "__main__":
    main()
