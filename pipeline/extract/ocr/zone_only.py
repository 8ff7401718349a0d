"""Images that are nothing but a machine-readable zone (1-3 lines filling the frame), as passport readers,
kiosks and scanners save a cut-out MRZ.

Why they need their own preparation: the text detector expects text with a background around it; a zone cut
to its lines touches the frame, so the detector clips or merges its lines, and at the 7-15 px characters
of a small strip the recogniser misreads digits, so a check digit fails. Such an image is recognised by its
shape alone (much wider than any document: an ID-1 card is 1.6 times as wide as high, a TD1 zone 3.3 times,
two 36- or 44-character lines 6-9 times) and by its ink (1-3 bands of text), then scaled so its characters
are `CHAR_HEIGHT` px high and given a margin of background on every side. The page is then read like any
other (the second reading of the zone, `mrz_reread`, straightens and re-contrasts each line when a check
still fails), so a zone-only image is decoded by the same rules as a zone on a page and nothing is decided
here.
"""

from __future__ import annotations

import cv2
import numpy as np

from pipeline.prepare.load import ZONE_STRIP_ASPECT

MIN_ASPECT = ZONE_STRIP_ASPECT  # width over height of a zone-only image; a whole document is below 1.7
MAX_LINES = 3
CHAR_HEIGHT = 32  # px, the characters' height after normalisation
MARGIN = 1.0  # of a character height, added on every side


def ink_rows(gray: np.ndarray) -> list[tuple[int, int]]:
    """The bands of text rows (first, last pixel row) of a grey image: rows holding a sixth of the densest
    row's dark ink (Otsu), gaps of one or two pixel rows bridged, bands under 3 px dropped."""
    _, dark = cv2.threshold(gray, 0, 1, cv2.THRESH_BINARY_INV | cv2.THRESH_OTSU)
    profile = dark.astype(np.float32).mean(axis=1)
    if profile.max() <= 0:
        return []
    on = profile >= profile.max() / 6
    bands: list[list[int]] = []
    for y in np.flatnonzero(on):
        if bands and y - bands[-1][1] <= 3:
            bands[-1][1] = int(y)
        else:
            bands.append([int(y), int(y)])
    return [(a, b) for a, b in bands if b - a + 1 >= 3]


def text_bands(pixels: np.ndarray) -> list[tuple[int, int]] | None:
    """The zone's line bands when `pixels` (RGB) is a zone-only image, else None."""
    h, w = pixels.shape[:2]
    if w < MIN_ASPECT * h:
        return None
    bands = ink_rows(cv2.cvtColor(pixels, cv2.COLOR_RGB2GRAY))
    if not 1 <= len(bands) <= MAX_LINES:
        return None
    covered = bands[-1][1] - bands[0][0] + 1
    return bands if covered >= 0.5 * h else None


def normalise(pixels: np.ndarray, bands: list[tuple[int, int]]) -> np.ndarray:
    """The image scaled so its characters (the median band height) are `CHAR_HEIGHT` px high, with `MARGIN`
    character heights of its own border colour around it."""
    char_h = float(np.median([b - a + 1 for a, b in bands]))
    scale = CHAR_HEIGHT / max(char_h, 1.0)
    h, w = pixels.shape[:2]
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    scaled = cv2.resize(pixels, size, interpolation=cv2.INTER_CUBIC if scale > 1 else cv2.INTER_AREA)
    border = np.concatenate([scaled[0], scaled[-1], scaled[:, 0], scaled[:, -1]])
    colour = tuple(int(c) for c in np.median(border, axis=0))
    pad = round(MARGIN * CHAR_HEIGHT)
    return cv2.copyMakeBorder(scaled, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=colour)


def prepared(pixels: np.ndarray) -> np.ndarray | None:
    """`pixels` normalised for reading when it is a zone-only image, else None."""
    bands = text_bands(pixels)
    return normalise(pixels, bands) if bands is not None else None
