"""Reading one upright page: the MRZ band first, the other boxes only as far as they can still change the result.

Why: recognition is most of a page's OCR time and grows with the number of boxes. On a passport, ID card or
visa whose MRZ passes every check digit, the fields come from the zone and the printed zone only confirms them
(the name words, the number and the birth date printed on the page: `cross.*` checks). Once those three have
passed, text not yet read cannot change the reading: an agreeing cross-check ignores disagreeing labels, the
ICAO expiry has its own check digit, and nothing else in `read_document` looks past the zone. So the reader
recognises the batches holding the band, decodes, and if the zone is fully checked recognises the other batches,
those with a box whose length fits a value to confirm first, until the three cross-checks pass. Anything short
of that (no zone, a failed digit, a French or licence zone, a value not printed) reads every box.
One exception to "cannot change": a printed full name that continues the zone's (a patronymic, see
`fields.formats.zone._printed_extension`) replaces the zone's name only if its boxes were read before the page was
decided; otherwise the zone's name, which the printed zone confirms, is kept.
Why it works on the recogniser's batches: a batch is padded to its longest crop and on poor print the padding
changes what is read, so a box is only ever recognised among the same neighbours as in a full read (with
`rapidocr_stages.REC_BATCH` = 1, alone).
"""

from __future__ import annotations

import math
from datetime import date

import numpy as np

from pipeline.extract.ocr import rapidocr_stages
from pipeline.formats.document import DocumentReading, OcrLine, read_document, zone_boxes_of
from pipeline.formats.lines import spellings
from pipeline.formats.registered import FORMATS
from pipeline.formats.zone import bare_number

BAND_FRACTION = 0.4  # the MRZ lies in the lowest 40 % of the page's text (3 lines of a TD1 card's 10-12)
BAND_MIN_ASPECT = 8.0  # MRZ lines are 30-44 characters long: boxes at least 8x as long as high
CHAR_ASPECT = 0.7  # printed capitals and digits: width of a character over its box's height
BIRTH_CHARS = 11  # a printed birth date: "05 AUG 1993", "05.08.1993"
CONFIRMING = ("cross.name_mrz_vs_viz", "cross.number_mrz_vs_viz", "cross.birth_mrz_vs_viz")
_ZONE_FIELDS = ("name", "id_number", "expiry_date")


def read_lines(pixels: np.ndarray, today: date, *, stop_early: bool = True) -> tuple[list[OcrLine], DocumentReading]:
    """The page's OCR lines (in RapidOCR's reading order) and their reading. Every box is recognised in the
    batch a full read puts it in, so a line reads the same whether the page was read to the end or not."""
    page = rapidocr_stages.detect(np.ascontiguousarray(pixels[:, :, ::-1]))  # RapidOCR expects OpenCV's BGR
    band = set(mrz_band(page.boxes))
    first = [b for b in page.batches if band.intersection(b)]
    rest = [b for b in page.batches if not band.intersection(b)]
    found: dict[int, OcrLine | None] = {}
    for batch in first:
        found.update(zip(batch, rapidocr_stages.recognise(page, batch), strict=True))
    reading = read_document(_in_order(found), today)
    if not stop_early or not zone_checked(reading):
        for batch in rest:
            found.update(zip(batch, rapidocr_stages.recognise(page, batch), strict=True))
        return _in_order(found), read_document(_in_order(found), today) if rest else reading
    unread = _likely_values_first(page.boxes, rest, reading)
    while unread:
        batch = unread.pop(0)
        found.update(zip(batch, rapidocr_stages.recognise(page, batch), strict=True))
        if not unread or _values_in_text(_in_order(found), reading):
            reading = read_document(_in_order(found), today)
            if decided(reading):
                break
    return _in_order(found), reading


def zone_checked(reading: DocumentReading) -> bool:
    """A zone whose format it settles (ICAO: its own expiry check digit) with every field read and no check
    failed."""
    return FORMATS.get(reading.format).settled_by_zone and "mrz.expiry" in reading.checks \
        and not reading.check_failures \
        and all(reading.states[k].state == "present" for k in _ZONE_FIELDS)


def decided(reading: DocumentReading) -> bool:
    """A checked zone whose name, number and birth date the printed zone has confirmed: more text cannot
    change the reading."""
    return zone_checked(reading) and all(c in reading.checks for c in CONFIRMING)


def mrz_band(boxes: np.ndarray) -> list[int]:
    """Indices of the boxes that may hold the MRZ: long boxes in the lowest part of the text, and every box on
    their rows (fragments of a line split at a filler run). Only decides what is read first, never what is read."""
    if not len(boxes):
        return []
    tops, bottoms = boxes[:, :, 1].min(axis=1), boxes[:, :, 1].max(axis=1)
    widths = boxes[:, :, 0].max(axis=1) - boxes[:, :, 0].min(axis=1)
    heights = np.maximum(bottoms - tops, 1.0)
    low = tops >= bottoms.max() - BAND_FRACTION * (bottoms.max() - tops.min())
    seeds = np.flatnonzero(low & (widths >= BAND_MIN_ASPECT * heights))
    middles = (tops + bottoms) / 2
    return [i for i in range(len(boxes))
            if any(abs(middles[i] - middles[s]) < 0.5 * min(heights[i], heights[s]) for s in seeds)]


def _likely_values_first(boxes: np.ndarray, batches: list[list[int]], reading: DocumentReading) -> list[list[int]]:
    """`batches` ordered by how well their best box's length fits one of the values to confirm (a name word,
    the number, a birth date), from the characters the zone gave them: printed capitals are ~0.7 of their
    box's height wide, and the labels around them (often bilingual) are much longer."""
    name, number = reading.fields["name"] or "", reading.fields["id_number"] or ""
    lengths = [n for n in [len(w) for w in name.split()] + [len(number), BIRTH_CHARS] if n]
    widths = boxes[:, :, 0].max(axis=1) - boxes[:, :, 0].min(axis=1)
    heights = np.maximum(boxes[:, :, 1].max(axis=1) - boxes[:, :, 1].min(axis=1), 1.0)
    aspects = np.maximum(widths / heights, 0.1)

    def misfit(batch: list[int]) -> float:
        return min(abs(math.log(aspects[i] / (CHAR_ASPECT * n))) for i in batch for n in lengths)

    return sorted(batches, key=misfit)


def _values_in_text(lines: list[OcrLine], reading: DocumentReading) -> bool:
    """Whether every name word and the number of `reading` occur somewhere in the printed text read so far
    (the boxes the cross-checks compare with: not the zone's, which hold them anyway): a cheap necessary
    condition for `decided` (a decode costs about as much as recognising a batch), used only to skip decodes
    that could not decide; the last decode always runs. The text is compared as the cross-checks compare it: the
    number without separators (`zone.bare_number`), the name words in each way a zone spells the print
    (`lines.spellings`)."""
    zone = zone_boxes_of(lines)
    printed = " ".join(x.text for x in lines if x not in zone)
    spelled = spellings(printed)
    name, number = reading.fields["name"] or "", reading.fields["id_number"] or ""
    return number in bare_number(printed) and all(any(word in text for text in spelled) for word in name.split())


def _in_order(found: dict[int, OcrLine | None]) -> list[OcrLine]:
    return [found[i] for i in sorted(found) if found[i] is not None]
