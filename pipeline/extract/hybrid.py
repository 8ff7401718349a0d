"""`--backend hybrid`: the embedded OCR first, the VLM only for pages the OCR could not settle.

Why: most pages in a nightly batch are clean, and for those the OCR plus check digits is both free and
verifiable. A page goes to the VLM only when the OCR reading fails validation or a field's confidence is below
`threshold`. When both have read a page, agreement is evidence (`cross.ocr_vs_vlm` passes) and disagreement is recorded
(`cross.ocr_vs_vlm` in `check_failures`); a value the OCR's checks vouch for is never replaced by the model's.

Confidence comes only from calibrated numbers, never from a made-up bonus: each half's extraction is already
scored by its own table (the OCR's, and the model's keyed table, unknown without one). A field both read alike
keeps the higher of the two; a field they read differently is capped at the disagreement cap (never
auto-accepted); a field only the model read keeps the model's confidence (unknown when no table was fitted
for its backend + model + prompt, so a person sees it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeline.datamodel import FIELD_NAMES, Extraction, Failure, FieldReading, PreparedImage
from pipeline.extract.base import ExtractionBackend
from pipeline.extract.registry import HYBRID, OCR
from pipeline.formats.registered import FORMATS
from pipeline.trust.rules import DISAGREEMENT_CAP
from pipeline.validate import field_errors

if TYPE_CHECKING:
    from pipeline.settings import Settings

PREFIX = f"{HYBRID.name}:"  # a result's `backend` is the half that read it, behind this


def passes_checks(reading: Extraction | Failure) -> bool:
    """A reading whose fields validate and whose check digits refute none of them (formats registered later
    count: the registry is asked at call time)."""
    refuting = FORMATS.refuting_checks()
    return isinstance(reading, Extraction) and not field_errors(reading.fields) and not any(
        c in refuting for c in reading.check_failures)


def needs_vlm(reading: Extraction | Failure, threshold: float) -> bool:
    """True when the OCR reading would fail validation or is not trusted enough to accept unreviewed."""
    if not passes_checks(reading):
        return True
    assert isinstance(reading, Extraction)
    return any(r.state == "unreadable" or (r.state == "present" and r.confidence < threshold)
               for r in reading.field_states.values())


def reconcile(ocr: Extraction | Failure, vlm: Extraction) -> Extraction:
    """One reading of a page both backends read. An OCR reading that passes its checks is the record and the VLM
    answer evidence, field by field: agreement keeps the higher of the two calibrated confidences, a clash caps
    the field below the threshold and keeps the OCR's value (its checks are about its values: an answer
    contradicting a passing checksum, or naming a field the OCR read as absent, is not stored over it), and a
    field the OCR could not read takes the answer's value with the answer's confidence. An OCR reading that fails
    its checks is no evidence: the answer stands alone. `cross.ocr_vs_vlm` passes only when the two agree on
    every field."""
    check = "cross.ocr_vs_vlm"
    agree = isinstance(ocr, Extraction) and all(ocr.fields.get(k) == vlm.fields.get(k) for k in FIELD_NAMES)
    if not passes_checks(ocr):
        vlm.backend = f"{PREFIX}{vlm.backend}"
        if isinstance(ocr, Extraction) and not agree:
            vlm.check_failures = sorted({*vlm.check_failures, check})
        return vlm
    assert isinstance(ocr, Extraction)
    fields, states = dict(ocr.fields), {}
    if fields.get("doc_type") in (None, "unknown"):
        fields["doc_type"] = vlm.fields.get("doc_type")
    for name in FIELD_NAMES:
        own, answer = ocr.field_states.get(name), vlm.fields.get(name)
        theirs = vlm.field_states.get(name)
        if own is None or own.state == "unreadable":
            fields[name] = answer
            states[name] = theirs if theirs is not None else FieldReading(
                answer, "present" if answer is not None else "unreadable", None)
        elif own.value == answer:
            states[name] = FieldReading(own.value, own.state, _higher(own.confidence, theirs))
        else:
            states[name] = FieldReading(own.value, own.state, _capped(own.confidence))
    return replace(ocr, fields=fields, field_states=states, backend=f"{PREFIX}{vlm.backend}", model=vlm.model,
                   checks=sorted(set(ocr.checks) | ({check} if agree else set())),
                   check_failures=sorted(set(ocr.check_failures) | ({check} if not agree else set())),
                   raw_response=vlm.raw_response, endpoint=vlm.endpoint, prompt_tokens=vlm.prompt_tokens,
                   completion_tokens=vlm.completion_tokens, latency_ms=ocr.latency_ms + vlm.latency_ms,
                   attempts=vlm.attempts)


def _higher(own: float | None, theirs: FieldReading | None) -> float | None:
    known = [c for c in (own, theirs.confidence if theirs is not None else None) if c is not None]
    return max(known) if known else None


def _capped(own: float | None) -> float:
    return DISAGREEMENT_CAP if own is None else min(own, DISAGREEMENT_CAP)


class HybridBackend:
    """`ExtractionBackend` composing the OCR backend and a VLM backend (openai or vllm)."""

    name = HYBRID.name

    def __init__(self, ocr: ExtractionBackend, vlm: ExtractionBackend, *, threshold: float) -> None:
        self._ocr, self._vlm, self._threshold = ocr, vlm, threshold

    @classmethod
    def from_run_settings(cls, settings: Settings) -> HybridBackend:
        vlm = HYBRID.vlm_of(settings)
        assert vlm is not None
        # the OCR half has read every page already: the VLM half does not read them with it a second time
        once = settings.model_copy(update={"openai": settings.openai.model_copy(update={"crosscheck": False})})
        return cls(OCR.build(settings), vlm.build(once), threshold=settings.hybrid_threshold)

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
            if isinstance(reading, Extraction) and not reading.backend.startswith(PREFIX):
                reading.backend = f"{PREFIX}{reading.backend}"
        return out

    async def aclose(self) -> None:
        await self._ocr.aclose()
        await self._vlm.aclose()
