"""RapidOCR's detection and recognition as two separate calls, for the embedded backend.

Why not `RapidOCR.__call__`: it detects at one scale rule for every page and recognises every box it found.
The backend wants (1) a detector scale chosen per page: small pages enlarged as RapidOCR does (short side
736 px), big ones capped (a 2400 px flatbed page costs ~4x the detection of a 1280 px one and its lines are
still 20+ px high there), and (2) to recognise the boxes in an order of its choosing and stop once the page is
decided (`page_read`). The stages are RapidOCR's own: its detector (through the same loader RapidOCR uses),
its crop, its recogniser and its score filter, so a full read here is what `__call__` returns. One engine per
thread: ONNX sessions are cheap to share, RapidOCR's Python state (the detector's scale rule) is not.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pipeline.fields.document import OcrLine

DETECT_MIN_SHORT_SIDE = 736  # RapidOCR's default `limit_side_len` (type "min"): small pages are enlarged to it
DETECT_MAX_LONG_SIDE = 1280  # big pages are shrunk to this long edge, but never below the short side above

_local = threading.local()


def _engine():  # noqa: ANN202 - RapidOCR has no public type to annotate with
    engine = getattr(_local, "engine", None)
    if engine is None:
        from rapidocr import RapidOCR

        # No per-line direction classifier: the prepare stage has already made the page upright and
        # `read_page` may retry the whole page at 180°, whereas the classifier, asked line by line, turns
        # single MRZ lines (fillers and digits look alike both ways up) upside down and garbles them.
        engine = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False})
        _local.engine = engine
    return engine


def detector_limit(height: int, width: int) -> tuple[str, int]:
    """RapidOCR's (`limit_type`, `limit_side_len`) for a page: today's "min 736" rule for pages whose short
    side is below 736 (enlarged, unchanged), else a "max" cap at 1280 px long edge that stops where the short
    side would drop below 736 (a long strip keeps its text height)."""
    short, long = min(height, width), max(height, width)
    if short < DETECT_MIN_SHORT_SIDE:
        return "min", DETECT_MIN_SHORT_SIDE
    ratio = max(DETECT_MIN_SHORT_SIDE / short, min(1.0, DETECT_MAX_LONG_SIDE / long))
    return "max", round(long * ratio)


def detect(bgr: np.ndarray) -> np.ndarray:
    """Text boxes of a BGR page, (N, 4, 2) float32 corners in page pixels, in RapidOCR's reading order."""
    detector = _engine()._load_det_model()
    # TextDetector builds its resize from these two attributes on every call; set per page (thread-local).
    detector.limit_type, detector.limit_side_len = detector_limit(*bgr.shape[:2])
    found = detector(bgr)
    return np.zeros((0, 4, 2), np.float32) if found.boxes is None else found.boxes


def recognise(bgr: np.ndarray, boxes: Sequence[np.ndarray]) -> list[OcrLine | None]:
    """One line per box, None where RapidOCR would drop it (empty text or a score below its `text_score`)."""
    if not len(boxes):
        return []
    from rapidocr.ch_ppocr_rec import TextRecInput
    from rapidocr.utils.process_img import get_rotate_crop_image

    engine = _engine()
    crops = [get_rotate_crop_image(bgr, np.array(box, np.float32)) for box in boxes]
    result = engine._load_rec_model()(TextRecInput(img=crops))
    min_score = engine.cfg.Global.text_score
    return [OcrLine(text=text, score=float(score), box=tuple((float(x), float(y)) for x, y in box))
            if text.strip() and score >= min_score else None
            for text, score, box in zip(result.txts, result.scores, boxes, strict=True)]

