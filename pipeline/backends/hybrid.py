"""`--backend hybrid`: the embedded OCR first, the VLM only for pages the OCR could not settle.

Why: most pages in a nightly batch are clean, and for those the OCR plus check digits is both free and
verifiable. A page goes to the VLM only when the OCR reading fails validation or a field's confidence is below
`threshold`. When both have read a page, agreement is evidence (confidence goes up, `cross.ocr_vs_vlm` passes)
and disagreement is recorded (`cross.ocr_vs_vlm` in `check_failures`, confidence down).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.backends.base import ExtractionBackend
from pipeline.datamodel import FIELD_NAMES, Extraction, Failure, FieldReading, PreparedImage
from pipeline.validate import FATAL_CHECKS, field_errors


def passes_checks(reading: Extraction | Failure) -> bool:
    return isinstance(reading, Extraction) and not field_errors(reading.fields) and not any(
        c in FATAL_CHECKS for c in reading.check_failures)


def needs_vlm(reading: Extraction | Failure, threshold: float) -> bool:
    """True when the OCR reading would fail validation or is not trusted enough to accept unreviewed."""
    if not passes_checks(reading):
        return True
    assert isinstance(reading, Extraction)
    return any(r.state == "unreadable" or (r.state == "present" and r.confidence < threshold)
               for r in reading.field_states.values())


def reconcile(ocr: Extraction | Failure, vlm: Extraction) -> Extraction:
    """The VLM answer, with OCR agreement as evidence: per field, agreement lifts confidence, a clash lowers it."""
    if isinstance(ocr, Failure):
        return vlm
    same = [k for k in FIELD_NAMES if ocr.fields.get(k) == vlm.fields.get(k)]
    states = {}
    for name in FIELD_NAMES:
        value = vlm.fields.get(name)
        state = "present" if value is not None else "absent"
        base = ocr.field_states[name].confidence if name in ocr.field_states else 0.5
        states[name] = FieldReading(value, state, min(1.0, base + 0.2) if name in same else base * 0.5)
    check = "cross.ocr_vs_vlm"
    agree = len(same) == len(FIELD_NAMES)
    vlm.field_states = states
    vlm.checks = sorted(set(vlm.checks) | set(ocr.checks) | ({check} if agree else set()))
    vlm.check_failures = sorted(set(vlm.check_failures) | ({check} if not agree else set()))
    vlm.backend = f"hybrid:{vlm.backend}"
    return vlm


class HybridBackend:
    """`ExtractionBackend` composing the OCR backend and a VLM backend (openai or vllm)."""

    name = "hybrid"

    def __init__(self, ocr: ExtractionBackend, vlm: ExtractionBackend, *, threshold: float) -> None:
        self._ocr, self._vlm, self._threshold = ocr, vlm, threshold

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        readings = await self._ocr.extract(batch)
        escalate = [i for i, r in enumerate(readings) if needs_vlm(r, self._threshold)]
        answers = await self._vlm.extract([batch[i] for i in escalate]) if escalate else []
        out: list[Extraction | Failure] = list(readings)
        for i, answer in zip(escalate, answers, strict=True):
            if isinstance(answer, Extraction):
                out[i] = reconcile(readings[i], answer)
            elif not passes_checks(readings[i]):
                out[i] = answer  # neither could settle the page: the VLM's failure says why
            # else: the VLM failed on a valid but low-confidence OCR reading; the OCR reading stands
        for i, reading in enumerate(out):
            if isinstance(reading, Extraction) and not reading.backend.startswith("hybrid:"):
                reading.backend = f"hybrid:{reading.backend}"
        return out

    async def aclose(self) -> None:
        await self._ocr.aclose()
        await self._vlm.aclose()
