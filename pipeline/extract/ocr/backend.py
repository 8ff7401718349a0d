"""The embedded, offline backend: RapidOCR (PP-OCR models shipped inside the wheel) + deterministic parsers.

Why it reads `full_pixels`: the VLM budget (≤1600 px, ≤1 Mpx) is chosen for token cost, but an MRZ on a
flatbed scan is small print; the OCR reads the upright page at up to 2400 px when the prepare stage kept it.
Why it reads in stages (`page_read`): the MRZ band first, then only as much of the printed zone as can still
change the result; and the detector is capped at 1280 px on big pages (`rapidocr_stages`).
Why it may read a page twice: orientation between 0° and 180° is sometimes a coin flip on sparse cards, so
when the first reading passes no check and the prepare stage was not sure of the direction
(`SURE_DIRECTION`), the page is read upside down too and the reading whose checksums pass wins (a check
digit is stronger evidence than a classifier's vote); with none passing, the one that read zone lines, then the
better score (`upright_evidence`). A sure direction was never wrong on the rotated
specimens, and a page with no check to pass (a printed-zone-only document) would otherwise always pay twice.
Why it may read the MRZ once more: when an MRZ left a field unreadable, failed a check digit or gave a name
the printed zone does not confirm on a zone that does not settle the page by itself (or no MRZ decoded on a page
that is not a PRC ID), `mrz_reread` cuts the zone out, straightens, upscales and re-contrasts it and
re-recognises its lines; that costs up to two thirds of a first pass, so it runs only on those pages. A PRC ID's
number that is unreadable or fails MOD 11-2 is re-read the same way from its own line (`cn_number_reread`), also
turned 180° when the direction was unsure.
Why it may read the printed name once more: on a dark or small page whose name is unreadable or unconfirmed,
`name_reread` re-recognises only the printed name lines, upscaled and re-contrasted (a few line recognitions).
Why a zone name may be read by a second reader: a name has no check digit; where the printed zone does not confirm
it, or confirms it on a poorly recognised zone, `mrz_glyphs` reads its zone line again cell by cell with a glyph
classifier of its own (another method than the recogniser's), and the two readings agreeing or not is recorded as a
check (a few milliseconds a page).
Why a zone-only image is resized first: a cut-out MRZ touches the frame and its characters are often small;
`zone_only` gives it the character height and margin the detector and recogniser read well (cost: one resize).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING

import numpy as np

from pipeline.datamodel import Extraction, Failure, PreparedImage
from pipeline.extract.ocr import (
    cn_number_reread,
    mrz_glyphs,
    mrz_reread,
    name_reread,
    page_read,
    rapidocr_stages,
    shake,
    zone_only,
)
from pipeline.extract.registry import OCR, ocr_model_id
from pipeline.formats.document import NAME_EXTENDED_CHECK, DocumentReading, OcrLine, read_document
from pipeline.formats.lines import filler_rich
from pipeline.formats.registered import FORMATS
from pipeline.memory import return_freed_memory

if TYPE_CHECKING:
    from pipeline.settings import Settings

MODEL_NAME = ocr_model_id()
# A page whose orientation confidence (from either path of `prepare.orient`) is at least this is taken as settled
# and read in its prepared direction only. The page classifier's bar (`prepare.orient.PAGE_MIN_CONFIDENCE`):
# below it, 180-degree errors were seen.
SURE_DIRECTION = 0.88

def recognise_line(bgr: np.ndarray) -> mrz_reread.Recognised:
    """Text, score and per-character probabilities of one line image (BGR), by the page reader's own
    recogniser (one set of models in the process)."""
    text, score, words = rapidocr_stages.recognise_strip(bgr)
    return mrz_reread.Recognised(text, score, rapidocr_stages.char_scores(text, words) if text else ())


def ocr_lines(pixels: np.ndarray) -> list[OcrLine]:
    """Every line RapidOCR finds on an RGB array, in reading order (a full read, no early stop)."""
    return rapidocr_stages.read_all(np.ascontiguousarray(pixels[:, :, ::-1]))  # RapidOCR expects OpenCV's BGR


def read_page(pixels: np.ndarray, today: date, *, try_flipped: bool = True,
              capture_long_edge: int | None = None) -> tuple[DocumentReading, int]:
    """Read a page; if nothing on it checks out and `try_flipped` (the prepare stage was not sure of the
    page's direction), also read it rotated 180° and keep the better reading.

    An image that is nothing but a machine-readable zone is first scaled to a fixed character height and given
    a margin (`zone_only`).

    `capture_long_edge`: the image's long edge as captured (a small capture is enlarged before it is read).

    Returns the reading and the extra rotation (0 or 180) that produced it.
    """
    zone = zone_only.prepared(pixels)
    if zone is not None:
        pixels = zone
    lines, reading = page_read.read_lines(pixels, today)
    rotation = 0
    if not reading.checks and try_flipped:
        flipped_pixels = np.ascontiguousarray(pixels[::-1, ::-1])
        flipped_lines, flipped = page_read.read_lines(flipped_pixels, today)
        if upright_evidence(flipped, flipped_lines) > upright_evidence(reading, lines):
            pixels, lines, reading, rotation = flipped_pixels, flipped_lines, flipped, 180
    if needs_second_reading(reading):
        reading, lines = second_reading(pixels, lines, reading, today)
    if cn_number_reread.needed(reading):  # a PRC number unreadable or failing MOD 11-2: re-read its line
        reading = cn_number_reread.second_reading(pixels, lines, reading, today, recognise_line, both_ways=try_flipped)
    # the printed name lines once more, upscaled and re-contrasted: only on dark or small pages whose name is
    # unreadable or unconfirmed (`name_reread`)
    if name_reread.needs_reread(reading) and name_reread.poor_capture(pixels, capture_long_edge):
        reading = name_reread.reread_name(pixels, lines, reading, today, recognise_line)
    # a zone name the printed zone does not confirm (or confirms on a poorly recognised zone): read its line once
    # more by another method, cell by cell
    # (`mrz_glyphs`); the two readers agreeing or not is evidence of its own
    if mrz_glyphs.wanted(reading):
        reading = mrz_glyphs.with_name_check(pixels, lines, reading)
    # a field only the recogniser vouches for (a PRC name): whether its box is smeared by camera shake (`shake`)
    if shake.wanted(reading):
        reading = shake.with_sharpness(pixels, lines, reading)
    return reading, rotation


def upright_evidence(reading: DocumentReading, lines: Sequence[OcrLine]) -> tuple[bool, int, float]:
    """What says a page was read the right way up, strongest first (compared between the page and its 180° turn):
    a check that passes; then zone lines read as such, since the fillers of a zone read upside down are no `<`
    (a zone its first pass could not decode is still a zone, which the second reading may decode); then the
    reading's score."""
    return bool(reading.checks), sum(filler_rich(x) for x in lines), reading.score


_MRZ_FIELDS = ("name", "id_number", "expiry_date")


def needs_second_reading(reading: DocumentReading) -> bool:
    """No MRZ decoded on a page whose format may carry one (not a PRC ID, whose sides have none), or an MRZ
    that left a field unreadable, failed a check digit, has a number only its check digit's choice repaired,
    or gave a name the printed zone does not confirm on a zone that does not settle its page."""
    if not FORMATS.get(reading.format).may_carry_mrz:
        return False
    if not _zone_decoded(reading):
        return True
    unreadable = any(reading.states[k].state == "unreadable" for k in _MRZ_FIELDS if k in reading.states)
    # the name line has no check digit: a name the printed zone does not confirm is worth a second look, except
    # on a zone that settles its page (every field read, every check passed), whose name the second reader
    # checks instead (`mrz_glyphs`, a hundredth of the cost): the print that could confirm it is not re-read
    unconfirmed = not {"cross.name_mrz_vs_viz", NAME_EXTENDED_CHECK} & set(reading.checks) \
        and not page_read.zone_checked(reading)
    return unreadable or unconfirmed or any(c.startswith(("mrz.", "repair.mrz")) for c in reading.check_failures)


def second_reading(pixels: np.ndarray, lines: list[OcrLine], first: DocumentReading,
                   today: date) -> tuple[DocumentReading, list[OcrLine]]:
    """The best of the first reading and the MRZ re-readings. A re-reading replaces the first one only with
    more evidence (more passed-minus-failed checks, or as many and more fields read) and never with fewer
    fields read; among such re-readings the score that also ranks orientations decides. A re-reading that
    merely scores higher on recognition confidence does not displace what the first pass read. Returns the
    reading and the lines it was read from (the zone's lines replaced by the re-read ones).

    The zone is re-read where the page has it. A zone running at 90° to the page's text
    (`mrz_reread.reread_turned`) is looked for only when the first pass read its zone boxes sideways
    (`mrz_reread.sideways`), or when neither the first reading nor any upright re-reading decoded a zone; it
    stops at the first variant whose zone passes every check, as each costs a recognition per line."""
    def evidence(r: DocumentReading) -> tuple[int, int]:
        return len(r.checks) - len(r.check_failures), r.present

    best, best_lines = first, lines

    def consider(alternative: mrz_reread.Reading) -> DocumentReading:
        nonlocal best, best_lines
        candidate_lines = mrz_reread.page_lines(lines, alternative)
        candidate = read_document(candidate_lines, today)
        if candidate.present >= first.present and evidence(candidate) > evidence(first) \
                and (evidence(candidate), candidate.score) > (evidence(best), best.score):
            best, best_lines = candidate, candidate_lines
        return candidate

    sideways = mrz_reread.sideways(lines)
    decoded = _zone_decoded(first) and not sideways
    if not sideways:
        for alternative in mrz_reread.reread(pixels, lines, recognise_line):
            decoded = _zone_decoded(consider(alternative)) or decoded
    if decoded:
        return best, best_lines
    for alternative in mrz_reread.reread_turned(pixels, recognise_line):
        consider(alternative)
        if page_read.zone_checked(best):
            break
    return best, best_lines


def _zone_decoded(reading: DocumentReading) -> bool:
    """Whether a machine-readable zone decoded at all (its checks ran, passed or not)."""
    return any(c.startswith("mrz.") for c in reading.checks + reading.check_failures)


class OcrBackend:
    """`ExtractionBackend` over the embedded OCR. CPU-bound: pages run in worker threads."""

    name = OCR.name

    def __init__(self, *, workers: int = 1, today: date | None = None) -> None:
        """Readings carry raw scores and their evidence; the validate stage scores them with the embedded table
        (`pipeline.trust.table.Trust`), the user's own (`idflow calibrate --backend ocr`) before the shipped one."""
        return_freed_memory()
        self._workers = asyncio.Semaphore(workers)
        self._today = today or date.today()

    @classmethod
    def from_run_settings(cls, settings: Settings) -> OcrBackend:
        # ONNX Runtime already uses every core for one page; more pages at once only oversubscribe the CPU.
        return cls(workers=max(1, min(settings.concurrency, (os.cpu_count() or 2) // 2)))

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        return list(await asyncio.gather(*(self._one(p) for p in batch)))

    async def _one(self, prepared: PreparedImage) -> Extraction | Failure:
        async with self._workers:
            return await asyncio.to_thread(self.read, prepared)

    def read(self, prepared: PreparedImage) -> Extraction:
        """Read one prepared page (blocking; CPU-bound)."""
        started = time.perf_counter()
        pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
        try_flipped = prepared.orientation_confidence < SURE_DIRECTION
        reading, extra_rotation = read_page(pixels, self._today, try_flipped=try_flipped,
                                            capture_long_edge=max(prepared.original_size))
        fields = {"doc_type": reading.doc_type, **reading.fields, "orientation": prepared.orientation}
        return Extraction(
            ref=prepared.ref,
            fields=fields,
            backend=self.name,
            model=MODEL_NAME,
            field_states=dict(reading.states),
            checks=list(reading.checks),
            check_failures=list(reading.check_failures),
            latency_ms=(time.perf_counter() - started) * 1000,
            rotation_correction=extra_rotation,
            issuer=reading.issuer,
        )

    async def aclose(self) -> None:
        return None
