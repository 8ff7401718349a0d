"""Camera shake on the box a field was read from, for fields whose only evidence is the recogniser's reading of
that one box (a PRC card's name: no checksum covers it and the card prints it once; `DocumentFormat.read_alone`).

Why: under camera shake the recogniser confuses characters a stroke apart (宇 and 字, 周 and 同) and stays sure of
them, at 0.99: its score says nothing there, so a table fitted mostly on sharp pages would accept such a name.
Shake smears every edge along one direction, so the box's gradients lose their spread of directions: the
smaller eigenvalue of the box's gradient structure tensor over the larger (`spread`) is 0.4-1 on a sharp box, whose
characters have strokes every way, and falls towards 0 as the shake lengthens. A darker, smaller or noisier capture
keeps its spread; only a smear along one direction removes it.

A box whose spread is under `SHAKEN` gets the failed check `SHARP_CHECK`; the format's evidence class for the field
is then another (`cn.passed_shaken`), which the calibration table fits apart from the sharp one and a rule no table
overrides holds below the auto-accept threshold (`pipeline.trust.rules.ceiling`): a hard seed's 李宇 was read 李字 at
0.991, a score at which the tuning pages had no shaken name wrong, and their names come from the generator's 55
characters where real names have thousands.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

import cv2
import numpy as np

from pipeline.formats.document import DocumentReading, OcrLine
from pipeline.formats.document_format import SHARP_CHECK
from pipeline.formats.registered import FORMATS

# Spread under which a box is shaken: on tuning seeds 111-112 (hard set, PRC fronts) sharp boxes under every other
# condition (dark phone photos, JPEG 15, moiré, 512 px photos, watermarks, turned photos) spread 0.40-0.99, and the
# motion-blurred ones 0.07-0.52 (median 0.22), both misread names among them under 0.2 (84% under this bound).
SHAKEN = 0.35


def spread(pixels: np.ndarray, box: Sequence[Sequence[float]]) -> float | None:
    """The smaller over the larger eigenvalue of the gradient structure tensor of the box's pixels (RGB array):
    1 when edges run every way equally, 0 when all run one way. None for a box of under 16 pixels."""
    pts = np.asarray(box, np.float32)
    x0, y0 = np.maximum(np.floor(pts.min(axis=0)).astype(int), 0)
    x1, y1 = np.ceil(pts.max(axis=0)).astype(int)
    crop = pixels[y0:y1, x0:x1]
    if crop.shape[0] * crop.shape[1] < 16:
        return None
    gray = cv2.cvtColor(np.ascontiguousarray(crop), cv2.COLOR_RGB2GRAY).astype(np.float32)
    gx = cv2.Sobel(gray, cv2.CV_32F, 1, 0, ksize=3)
    gy = cv2.Sobel(gray, cv2.CV_32F, 0, 1, ksize=3)
    jxx, jyy, jxy = float((gx * gx).mean()), float((gy * gy).mean()), float((gx * gy).mean())
    half, root = (jxx + jyy) / 2, ((jxx - jyy) ** 2 / 4 + jxy ** 2) ** 0.5
    return (half - root) / (half + root) if half + root > 0 else None


def box_of(lines: Sequence[OcrLine], value: str) -> OcrLine | None:
    """The box the value was read from: the one holding it verbatim, else the one most like it (a value a second
    reading changed), None when no box shares half of it."""
    holding = [x for x in lines if value and value in x.text]
    if holding:
        return min(holding, key=lambda x: len(x.text))
    scored = [(difflib.SequenceMatcher(None, value, x.text).find_longest_match().size, x) for x in lines]
    best = max(scored, key=lambda s: s[0], default=(0, None))
    return best[1] if best[0] * 2 >= len(value) > 0 else None


def wanted(reading: DocumentReading) -> bool:
    """Whether the reading has a present field that its format vouches for by recognition alone."""
    fields = FORMATS.get(reading.format).read_alone
    return any(reading.states.get(f) is not None and reading.states[f].state == "present" for f in fields)


def with_sharpness(pixels: np.ndarray, lines: Sequence[OcrLine], reading: DocumentReading) -> DocumentReading:
    """The reading with `SHARP_CHECK` passed when every field read by recognition alone comes from a sharp box,
    failed when one comes from a shaken box, unchanged when no such box is found."""
    verdicts = []
    for name in FORMATS.get(reading.format).read_alone:
        value, state = reading.fields.get(name), reading.states.get(name)
        box = box_of(lines, value) if value and state is not None and state.state == "present" else None
        measured = spread(pixels, box.box) if box is not None else None
        if measured is not None:
            verdicts.append(measured >= SHAKEN)
    if not verdicts:
        return reading
    if all(verdicts):
        return dataclasses.replace(reading, checks=[*reading.checks, SHARP_CHECK])
    return dataclasses.replace(reading, check_failures=[*reading.check_failures, SHARP_CHECK])
