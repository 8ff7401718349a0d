"""Find the document on a large page (a flatbed scan of an A4 sheet with the card in a corner), to crop to it.

Why: the working page is capped in size (OCR detector time, VLM tokens), and shrinking a whole 4000 px A4 scan
to that cap shrinks a card in its corner to less than half its scanned resolution; the MRZ then becomes
unreadable. Cropping to the document first keeps the card at (close to) its scanned resolution.

How: on a small copy of the page, a pixel is "content" if it differs in colour from the page background
(estimated from the page border) or sits on a sharp edge (text, card outline). Content is closed into blobs;
the crop is the box around all sizeable blobs, with a margin. Nothing is cropped unless the content clearly
occupies a small part of the page, so a card filling a photo or a full-page document is left alone. The crop
is axis-aligned and taken before orientation, so a rotated or skewed card is kept whole. The search needs no
more than `ANALYSIS_LONG_EDGE` pixels, so it can run on a cheap reduced decode of the page, and give the box in
the coordinates of the full-size page that is then decoded (only as large as the box needs).
"""

from __future__ import annotations

import cv2
import numpy as np

from pipeline.prepare.resize import cap_long_edge

ANALYSIS_LONG_EDGE = 800  # content is found on a copy this size (~15 ms on a 4000 px page)
COLOUR_DIFF = 12  # colour difference from the background that counts as content: a pale card on white paper
# differs by ~10-15; the paper itself, averaged by the downscale, by ~1 (a stricter threshold only grows the box)
EDGE_DIFF = 40  # grey-level morphological gradient that counts as an edge
MIN_BLOB_FRACTION = 0.002  # blobs smaller than this share of the page are dust, not document
MAX_AREA_FRACTION = 0.55  # crop only when the document box is at most this share of the page area ...
MAX_SIDE_FRACTION = 0.8  # ... or when both its sides are at most this share of the page's sides
MARGIN_FRACTION = 0.05  # margin around the box, as a share of the box's long side


def find_document(rgb: np.ndarray, page_size: tuple[int, int] | None = None) -> tuple[int, int, int, int] | None:
    """(x0, y0, x1, y1) of the document on `rgb`, or None to keep the whole page.

    The box is in the pixel coordinates of `page_size` (w, h), the full size of the page `rgb` is a reduced copy
    of (default: `rgb`'s own size).
    """
    w, h = page_size or (rgb.shape[1], rgb.shape[0])
    small = cap_long_edge(rgb, ANALYSIS_LONG_EDGE)
    sh, sw = small.shape[:2]
    if min(sh, sw) < 32:
        return None
    scale = w / sw
    ring = max(2, round(0.01 * max(sh, sw)))
    border = np.concatenate([small[:ring].reshape(-1, 3), small[-ring:].reshape(-1, 3),
                             small[:, :ring].reshape(-1, 3), small[:, -ring:].reshape(-1, 3)])
    background = np.full_like(small, np.median(border, axis=0).astype(np.uint8))
    diff = cv2.absdiff(small, background)  # per channel; numpy's max over a 3-wide last axis took ~15 ms a page
    colour = np.maximum(np.maximum(diff[..., 0], diff[..., 1]), diff[..., 2]) > COLOUR_DIFF
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY)
    edges = cv2.morphologyEx(grey, cv2.MORPH_GRADIENT, np.ones((3, 3), np.uint8)) > EDGE_DIFF
    mask = (colour | edges).astype(np.uint8)
    k = max(3, round(0.02 * max(sh, sw)) | 1)
    mask = cv2.morphologyEx(mask, cv2.MORPH_CLOSE, np.ones((k, k), np.uint8))
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    blobs = [s for s in stats[1:count] if s[cv2.CC_STAT_AREA] >= MIN_BLOB_FRACTION * sh * sw]
    if not blobs:
        return None
    x0 = min(s[cv2.CC_STAT_LEFT] for s in blobs)
    y0 = min(s[cv2.CC_STAT_TOP] for s in blobs)
    x1 = max(s[cv2.CC_STAT_LEFT] + s[cv2.CC_STAT_WIDTH] for s in blobs)
    y1 = max(s[cv2.CC_STAT_TOP] + s[cv2.CC_STAT_HEIGHT] for s in blobs)
    bw, bh = x1 - x0, y1 - y0
    small_area = bw * bh <= MAX_AREA_FRACTION * sw * sh
    small_sides = bw <= MAX_SIDE_FRACTION * sw and bh <= MAX_SIDE_FRACTION * sh
    if not (small_area or small_sides):
        return None
    margin = MARGIN_FRACTION * max(bw, bh)
    return (max(0, int((x0 - margin) * scale)), max(0, int((y0 - margin) * scale)),
            min(w, int(np.ceil((x1 + margin) * scale))), min(h, int(np.ceil((y1 + margin) * scale))))
