"""The prepare stage: one page in, one upright page fitted to the visual-token budget out (or a Failure).

load (decode any container/mode to RGB, no larger than needed) -> crop (flatbed page to the card) -> orient
(rotation + skew from text lines) -> resize (patch grid).
A bad document never raises: container problems become stage "ingest" failures, undecodable or tiny pages
stage "preprocess" failures, so a run always finishes.
"""

from __future__ import annotations

import numpy as np

from pipeline.datamodel import REASON_STAGES, DocumentRef, Failure, PreparedImage, Reason, Stage
from pipeline.ingest.containers import ContainerError
from pipeline.prepare.crop import ANALYSIS_LONG_EDGE, find_document
from pipeline.prepare.load import VerifiedPage
from pipeline.prepare.orient import Orientation, apply_orientation, make_upright
from pipeline.prepare.resize import (
    cap_long_edge,
    capped_size,
    decode_jpeg,
    encode,
    enlarge_long_edge,
    fit_to_budget,
    resize_to,
    visual_tokens,
)
from pipeline.settings import PrepareSettings

__all__ = ["FULL_MAX_LONG_EDGE", "Orientation", "decode_jpeg", "encode", "fit_to_budget", "prepare_page",
           "visual_tokens"]

# The embedded OCR reads small print (MRZ, ID numbers) better above the VLM budget, up to about this size;
# beyond it only costs memory and detector time.
FULL_MAX_LONG_EDGE = 2400
# ... and a small capture that needs deskewing is better enlarged to at least this size first: rotating a 512 px
# phone copy of an A4 sheet blurs its 5 px digits past reading (`310104...` read as `320104...`), while the same
# rotation of a cubic 2x enlargement keeps them. Only then: a straight small page read as it is lost fewer
# fields on the real specimens than enlarged (the recogniser scales every line to 48 px high anyway).
FULL_MIN_LONG_EDGE = 1024
# A page only sent to a VLM may be decoded up to this much smaller than it is sent, then enlarged to it: a
# 1700x2400 JPEG sent at 832x1216 is decoded at half size (1200 px, 1.3 % short) for about a third of the CPU of
# a full decode; the model sees no difference in 2 % of resolution.
VLM_DECODE_SLACK = 0.02



def prepare_page(ref: DocumentRef, settings: PrepareSettings, *, keep_full: bool = True,
                 orientation: Orientation | None = None) -> PreparedImage | Failure:
    """Decode, orient and resize the page `ref`; a `Failure` (never an exception) for a bad document.

    `keep_full=False` leaves `full_pixels` out: only the embedded OCR reads it, and for a VLM run it would
    make every queued page up to 6x larger than what is sent. `orientation`, when a run already found it (a
    review picture of a record), is applied instead of being looked for again.
    """
    # Orientation and skew are found and applied at working size: nothing downstream needs more pixels.
    try:
        working, original_size = _working_page(ref, settings, keep_full)
    except ContainerError as e:
        return Failure.for_ref(ref, _stage_of(e.reason), e.reason, e.detail)
    if orientation is None:
        upright, found = make_upright(working)
    else:
        upright, found = apply_orientation(working, orientation), orientation
    height, width = upright.shape[:2]
    sent = resize_to(upright, fit_to_budget(width, height, settings))
    if keep_full and found.skew and max(working.shape[:2]) < FULL_MIN_LONG_EDGE:
        full = apply_orientation(enlarge_long_edge(working, FULL_MIN_LONG_EDGE), found)
    else:
        full = cap_long_edge(upright, FULL_MAX_LONG_EDGE)
    return PreparedImage(
        ref=ref,
        pixels=sent,
        original_size=original_size,
        sent_size=(sent.shape[1], sent.shape[0]),
        rotation_applied=found.rotation,
        skew_corrected=found.skew,
        orientation="landscape" if width >= height else "portrait",
        visual_tokens=visual_tokens(sent.shape[1], sent.shape[0], settings.patch),
        full_pixels=full if keep_full and full.shape[0] * full.shape[1] > sent.shape[0] * sent.shape[1] else None,
        orientation_confidence=found.confidence,
    )


def _working_page(ref: DocumentRef, settings: PrepareSettings,
                  keep_full: bool) -> tuple[np.ndarray, tuple[int, int]]:
    """The page (or the document on it) at working size, and the page's full size; decoded no larger than that
    needs (a JPEG by DCT scaling, a PDF at a lower dpi).

    The working size of a VLM run is the size sent (`fit_to_budget`), so a page that needs no deskewing is
    resized once; with a full-size copy for the OCR it is that copy's size (long edge `FULL_MAX_LONG_EDGE`).
    A page larger than that may be a flatbed scan with the card in a corner: it is cropped to the document
    first, so the card is shrunk, not the empty page around it. The card is looked for on a decode sized for
    the whole page; only a card too small in that decode costs a second, larger one.
    """
    page = VerifiedPage(ref, settings)
    full_edge = max(FULL_MAX_LONG_EDGE, settings.max_long_edge)
    edge = full_edge if keep_full else settings.max_long_edge
    box = None
    if max(page.size) > full_edge:
        box = find_document(page.pixels(max(edge, ANALYSIS_LONG_EDGE)), page.size)
    x0, y0, x1, y1 = box or (0, 0, *page.size)
    if keep_full:
        return page.region(box, capped_size(x1 - x0, y1 - y0, edge)), page.size
    return page.region(box, fit_to_budget(x1 - x0, y1 - y0, settings), slack=VLM_DECODE_SLACK), page.size


def _stage_of(reason: Reason) -> Stage:
    """Problems with the file itself are recorded at "ingest", problems with its pixels at "preprocess"."""
    return "ingest" if REASON_STAGES[reason] == "ingest" else "preprocess"
