"""A second, independent reading of a VLM answer's unproven fields by the embedded OCR (on by default;
`IDFLOW_OPENAI_CROSSCHECK=false` switches it off).

Why: a check digit proves an MRZ number or date, and MOD 11-2 a PRC number, but nothing in a PRC card's name or
its back's validity, or in a name its zone does not confirm, can be checked; the model's own "printed" copy is
the same reading of the same glyphs. A reading by another method of the same page is independent evidence: when
the OCR reads the same value, both are wrong together only rarely, so the field gets at least the confidence the
embedded table gives the OCR's reading of it (`pipeline.trust.table.floored`; no table for the model needed), and
a table fitted by `idflow calibrate` measures the class of two agreeing readings (`field/<source>+ocr/...`);
when it reads another value, the document goes to a person.

Cost: one OCR reading of each page that has an unproven field (not of a page its zone proves), on this
machine's CPU. The readings of every backend instance in the process (a vLLM pool has one per endpoint) share
one bounded thread pool of `workers` threads, so a fast endpoint never starts more OCR than the cores can run;
the OCR's models are loaded at the first page that needs them. A page waiting for its reading holds no request
slot (`pipeline.extract.base.Unfinished`: the engine finishes it on workers of its own), and holds only the JPEG
the model was sent: the OCR reads that JPEG, decoded when its turn comes (`as_sent`), so the pages queued for a
reading cost a tenth of their arrays' memory, and the two readers read the same picture.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any


from pipeline.datamodel import FieldReading, PreparedImage
from pipeline.extract.model.answer_evidence import Judged, unproven, with_ocr_reading
from pipeline.prepare.resize import decode_jpeg

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The process's OCR threads: ONNX Runtime already spreads one page over the cores, so half of them."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) // 2),
                                       thread_name_prefix="idflow-crosscheck")
        return _pool


def as_sent(page: PreparedImage) -> PreparedImage:
    """The page with pixels to read: its own, or those of the JPEG the model was sent (`PreparedImage.sent_jpeg`:
    the engine keeps only that while a page waits), decoded whole."""
    if page.pixels is not None or page.full_pixels is not None or page.sent_jpeg is None:
        return page
    return dataclasses.replace(page, pixels=decode_jpeg(page.sent_jpeg))


class OcrCrossCheck:
    """Reads a page with the embedded OCR (raw scores and evidence classes: the embedded table scores them in
    `pipeline.trust.table`) and judges an answer against it."""

    def __init__(self) -> None:
        self._reader: Any = None

    def _read(self, page: PreparedImage) -> tuple[dict[str, FieldReading], dict[str, str]]:
        from pipeline.trust.table import field_class

        if self._reader is None:
            from pipeline.extract.ocr.backend import OcrBackend  # loads RapidOCR: only when a page needs it

            self._reader = OcrBackend()
        reading = self._reader.read(as_sent(page))
        classes = {name: field_class(reading, name) for name, state in reading.field_states.items()
                   if state.state == "present"}
        return dict(reading.field_states), classes

    async def judge(self, page: PreparedImage, fields: dict[str, Any], judged: Judged) -> Judged:
        """`judged` with the OCR's reading compared on the unproven fields; unchanged when every field is
        proven (no OCR is run)."""
        names = unproven(fields, judged)
        if not names:
            return judged
        states, classes = await asyncio.get_running_loop().run_in_executor(_executor(), self._read, page)
        return with_ocr_reading(fields, judged, states, names, classes)
