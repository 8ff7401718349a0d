"""A second, targeted reading of the printed name line(s), for dark or small pages whose first reading left the
name unreadable or gave a machine-readable name the printed zone does not confirm.

Why a second reading helps: on an underexposed photo or a 512 px capture the printed name is a few pixels tall
and low in contrast; the first pass finds its box but misreads a letter, so the zone's name is not confirmed and
the document cannot be auto-accepted. The name's value boxes are known (under the surname / given-name / name
labels, `printed_zone.value_below`, or the box most like the zone's name), so each is cut out, upscaled to a fixed
text height, contrast-normalised (`mrz_reread.variants`: CLAHE, background flattening, ...) and re-recognised
with the recognition model alone.

Why it cannot invent: a re-read line only replaces its first-pass box, and the page is read again by the same
rules (`read_document`: the same `cross.name_mrz_vs_viz` check, the same confidence, the same calibration
class). The new reading is kept only when it confirms the zone's name that the first did not (`accepts`), with
every other field as it was; on a page without a zone, only a full name that passes the name-shape rules and that
most contrast variants read alike. A re-read that reads another name confirms nothing and changes nothing.
"""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Sequence
from datetime import date

import cv2
import numpy as np

from pipeline.extract.ocr import mrz_reread
from pipeline.extract.ocr.mrz_reread import Recognise, Row
from pipeline.formats.document import NAME_EXTENDED_CHECK, DocumentReading, OcrLine, read_document, zone_boxes_of
from pipeline.formats.lines import fold
from pipeline.formats.names import looks_like_name
from pipeline.formats.printed_zone import label_kind, value_below

CONFIRMED = "cross.name_mrz_vs_viz"
# A capture is small when its long edge (as taken, before any enlargement) is at most this: a 512-1000 px photo
# prints a passport's name 8-15 px tall, which the first pass misreads; a scan or a full phone photo is larger.
SMALL_CAPTURE = 1000
# A page is dark when its median brightness (0-255) is below this: an underexposed photo (a well-lit photo or a
# scan of a document is well above 150).
DARK = 90.0
_NAME_KINDS = ("surname", "given", "name")
_MAX_TARGETS = 3  # surname, given names, or a full-name line: no layout prints more name lines
_SIMILAR = 0.5  # an unlabelled box this similar to a zone name word may be that word misread


def needs_reread(reading: DocumentReading) -> bool:
    """The name is unreadable, or a decoded zone's name is not confirmed by the printed zone."""
    name = reading.states.get("name")
    if name is not None and name.state == "unreadable":
        return True
    zone = any(c.startswith("mrz.") for c in reading.checks + reading.check_failures)
    return zone and reading.fields.get("name") is not None and \
        not {CONFIRMED, NAME_EXTENDED_CHECK} & set(reading.checks)


def poor_capture(pixels: np.ndarray, capture_long_edge: int | None = None) -> bool:
    """A small capture (`capture_long_edge`, the image's long edge as taken; the page's own without it) or a
    dark page (median brightness under `DARK`)."""
    long_edge = capture_long_edge if capture_long_edge is not None else max(pixels.shape[:2])
    if long_edge <= SMALL_CAPTURE:
        return True
    step = max(1, max(pixels.shape[:2]) // 400)  # a 400 px sample is enough for a median
    return float(np.median(cv2.cvtColor(pixels[::step, ::step], cv2.COLOR_RGB2GRAY))) < DARK


def targets(lines: Sequence[OcrLine], zone_name: str | None) -> list[OcrLine]:
    """The boxes the name is read from: the values under the name labels, and, with no label read, the boxes
    most like a word of the zone's name (outside the zone). At most `_MAX_TARGETS`."""
    zone = set(zone_boxes_of(lines))
    printed = [x for x in lines if x not in zone]
    found: list[OcrLine] = []
    for line in printed:
        if label_kind(line.text) in _NAME_KINDS and (value := value_below(line, printed)) is not None \
                and value not in found:
            found.append(value)
    if not found and zone_name:
        words = fold(zone_name).split()
        scored = sorted(((max(difflib.SequenceMatcher(None, fold(x.text), w).ratio() for w in words), i)
                         for i, x in enumerate(printed) if fold(x.text)), reverse=True)
        found = [printed[i] for ratio, i in scored if ratio >= _SIMILAR][:len(words)]
    return found[:_MAX_TARGETS]


def _row(line: OcrLine) -> Row:
    """The box as a straightened row: centre, angle of its top edge, height, and half its length plus a
    character's margin either side (a first-pass box often clips the first or last letter)."""
    (x0, y0), (x1, y1) = line.box[0], line.box[1]
    height = (math.dist(line.box[0], line.box[3]) + math.dist(line.box[1], line.box[2])) / 2
    cx = sum(p[0] for p in line.box) / 4
    cy = sum(p[1] for p in line.box) / 4
    return Row(cx, cy, math.atan2(y1 - y0, x1 - x0), max(height, 1.0), math.dist(line.box[0], line.box[1]) / 2
               + 0.6 * height)


def strips(pixels: np.ndarray, boxes: Sequence[OcrLine]) -> list[dict[str, np.ndarray]]:
    """Each box cut out (re-centred on its ink, a character's margin either side), upscaled to the MRZ strips'
    text height and contrast-normalised: per box, variant name -> BGR image."""
    return [mrz_reread.variants(mrz_reread.strip(pixels, mrz_reread.refine(pixels, _row(b), max_growth=1.6)))
            for b in boxes]


def recognised(boxes: Sequence[OcrLine], images: Sequence[dict[str, np.ndarray]], variant: str,
               recognise: Recognise) -> dict[OcrLine, OcrLine]:
    """One variant of every box re-recognised: first-pass box -> line with the same box and the new text and
    score; boxes read as nothing are left out."""
    out = {}
    for box, imgs in zip(boxes, images):
        read = recognise(imgs[variant])
        if read.text.strip():
            out[box] = OcrLine(read.text, read.score, box.box, read.char_scores)
    return out


def _by_box(reread: Sequence[dict[OcrLine, OcrLine]]) -> dict[OcrLine, list[OcrLine]]:
    by_box: dict[OcrLine, list[OcrLine]] = {}
    for swap in reread:
        for box, line in swap.items():
            by_box.setdefault(box, []).append(line)
    return by_box


def closest(reread: Sequence[dict[OcrLine, OcrLine]], zone_name: str) -> dict[OcrLine, OcrLine]:
    """For each box, the re-reading closest to a word of the zone's name (it still has to match the name exactly
    to confirm anything: `accepts`)."""
    words = fold(zone_name).split()

    def closeness(x: OcrLine) -> float:
        return max(difflib.SequenceMatcher(None, fold(x.text), w).ratio() for w in words)

    return {box: max(lines, key=closeness) for box, lines in _by_box(reread).items()}


def voted(reread: Sequence[dict[OcrLine, OcrLine]]) -> dict[OcrLine, OcrLine]:
    """For each box, the text most variants read (ties to the higher score)."""
    out = {}
    for box, found in _by_box(reread).items():
        counts = Counter(fold(x.text) for x in found)
        out[box] = max(found, key=lambda x: (counts[fold(x.text)], x.score))
    return out


def agreed_by_most(boxes: Sequence[OcrLine], reread: Sequence[dict[OcrLine, OcrLine]]) -> bool:
    """Every box read alike by more than half of the variants: on a page without a zone nothing else vouches
    for the text."""
    def majority(box: OcrLine) -> bool:
        texts = Counter(fold(swap[box].text) for swap in reread if box in swap)
        return bool(texts) and texts.most_common(1)[0][1] * 2 > len(reread)

    return bool(boxes) and bool(reread) and all(majority(b) for b in boxes)


def accepts(first: DocumentReading, candidate: DocumentReading, *, agreed: bool) -> bool:
    """Whether a reading with re-read name lines replaces the first one.

    With a zone: the candidate confirms the zone's name (`cross.name_mrz_vs_viz` passed) where the first did
    not, fails no check the first passed, and leaves every other field as it was. Without a zone: the first had
    no name, the candidate has one that looks like a name, the variants agreed on it (`agreed`) and every other
    field is unchanged. Anything else (a re-read that reads another name) confirms nothing.
    """
    others_same = all(candidate.fields.get(k) == v for k, v in first.fields.items() if k != "name")
    if not others_same or candidate.format != first.format:
        return False
    zone = any(c.startswith("mrz.") for c in first.checks + first.check_failures)
    if zone:
        lost = set(first.checks) - set(candidate.checks)
        return CONFIRMED in candidate.checks and CONFIRMED not in first.checks and not lost \
            and candidate.states["name"].state == "present"
    name = candidate.fields.get("name")
    return agreed and first.fields.get("name") is None and name is not None and looks_like_name(name) \
        and candidate.states["name"].state == "present"


def reread_name(pixels: np.ndarray, lines: list[OcrLine], first: DocumentReading, today: date,
                recognise: Recognise) -> DocumentReading:
    """The first reading, or one whose name a re-read of its printed name lines confirms (`accepts`).

    With a zone, the variants are tried one at a time and the first that confirms the zone's name ends the
    re-read (each costs one recognition per box); without one, every variant is read, as they must agree."""
    zone_name = first.fields.get("name") if any(c.startswith("mrz.") for c in first.checks) else None
    zone = any(c.startswith("mrz.") for c in first.checks + first.check_failures)
    boxes = targets(lines, zone_name)
    if not boxes:
        return first
    images = strips(pixels, boxes)
    reread: list[dict[OcrLine, OcrLine]] = []

    def better(swap: dict[OcrLine, OcrLine], agreed: bool) -> DocumentReading | None:
        candidate = read_document([swap.get(x, x) for x in lines], today)
        return candidate if swap and accepts(first, candidate, agreed=agreed) else None

    for variant in images[0]:
        reread.append(recognised(boxes, images, variant, recognise))
        if not zone:
            continue
        found = better(reread[-1], False)
        if found is None and zone_name and len(reread) > 1:  # mixing variants box by box
            found = better(closest(reread, zone_name), False)
        if found is not None:
            return found
    if zone:
        return first
    return better(voted(reread), agreed_by_most(boxes, reread)) or first
