"""The embedded, offline backend: RapidOCR (PP-OCR models shipped inside the wheel) + deterministic parsers.

Why it reads `full_pixels`: the VLM budget (≤1600 px, ≤1 Mpx) is chosen for token cost, but an MRZ on a
flatbed scan is small print; the OCR reads the upright page at up to 2400 px when the prepare stage kept it.
Why it may read a page twice: orientation between 0° and 180° is sometimes a coin flip on sparse cards, so
when the first reading passes no check the page is read upside down too and the reading whose checksums
pass wins (a check digit is stronger evidence than a classifier's vote).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from datetime import date
from importlib.metadata import version

import numpy as np

from pipeline.datamodel import Extraction, Failure, PreparedImage
from pipeline.fields.document import DocumentReading, OcrLine, read_document

MODEL_NAME = f"rapidocr-{version('rapidocr')}-ppocr"

_local = threading.local()


def _engine():  # noqa: ANN202 - RapidOCR has no public type to annotate with
    """One engine per thread: ONNX sessions are cheap to share, RapidOCR's Python state is not."""
    engine = getattr(_local, "engine", None)
    if engine is None:
        from rapidocr import RapidOCR

        # No per-line direction classifier: the prepare stage has already made the page upright and
        # `read_page` retries the whole page at 180°, whereas the classifier, asked line by line, turns
        # single MRZ lines (fillers and digits look alike both ways up) upside down and garbles them.
        engine = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False})
        _local.engine = engine
    return engine


def ocr_lines(pixels: np.ndarray) -> list[OcrLine]:
    """Run RapidOCR on an RGB array and return its lines in reading order."""
    result = _engine()(np.ascontiguousarray(pixels[:, :, ::-1]))  # RapidOCR expects OpenCV's BGR
    if result.txts is None:
        return []
    return [
        OcrLine(text=text, score=float(score), box=tuple((float(x), float(y)) for x, y in box))
        for text, score, box in zip(result.txts, result.scores, result.boxes, strict=True)
    ]


def read_page(pixels: np.ndarray, today: date) -> tuple[DocumentReading, int]:
    """Read a page; if nothing on it checks out, also read it rotated 180° and keep the better reading.

    Returns the reading and the extra rotation (0 or 180) that produced it.
    """
    reading = read_document(ocr_lines(pixels), today)
    if reading.checks:
        return reading, 0
    flipped = read_document(ocr_lines(np.ascontiguousarray(pixels[::-1, ::-1])), today)
    return (flipped, 180) if flipped.score > reading.score else (reading, 0)


class OcrBackend:
    """`ExtractionBackend` over the embedded OCR. CPU-bound: pages run in worker threads."""

    name = "ocr"

    def __init__(self, *, workers: int = 1, today: date | None = None) -> None:
        self._workers = asyncio.Semaphore(workers)
        self._today = today or date.today()

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        return list(await asyncio.gather(*(self._one(p) for p in batch)))

    async def _one(self, prepared: PreparedImage) -> Extraction | Failure:
        async with self._workers:
            return await asyncio.to_thread(self._extract_sync, prepared)

    def _extract_sync(self, prepared: PreparedImage) -> Extraction:
        started = time.perf_counter()
        pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
        reading, extra_rotation = read_page(pixels, self._today)
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
        )

    async def aclose(self) -> None:
        return None
