"""`--backend hybrid`: the embedded OCR first, the VLM only for pages the OCR could not settle.

Why: most pages in a nightly batch are clean, and for those the OCR plus check digits is both free and
verifiable. A page goes to the VLM only when the OCR reading fails validation or a field's confidence is below
`threshold`; to decide that, the hybrid scores a copy of the OCR's reading with the run's tables (`Trust`), and
what it returns carries raw scores like every backend's, scored once after validation. When both have read a
page, agreement is evidence (`cross.ocr_vs_vlm` passes) and disagreement is recorded (`cross.ocr_vs_vlm` in
`check_failures`); a value the OCR's checks vouch for is never replaced by the model's.

Confidence comes only from calibrated numbers, never from a made-up bonus. A reconciled page is the model's
answer for scoring (the model's keyed table, unknown without one) with the OCR's reading as its embedded evidence
(`Extraction.embedded`): a field both read alike gets at least what the OCR's table gives the OCR's reading (the
higher of the two), a field they read differently fails the answer-against-OCR check and is capped by the rule no
table overrides (never auto-accepted), and a field only the model read keeps the model's confidence (unknown
when no table was fitted for its backend + model + prompt, so a person sees it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pipeline.datamodel import FIELD_NAMES, Extraction, Failure, FieldReading, PreparedImage
from pipeline.extract.base import ExtractionBackend
from pipeline.extract.registry import HYBRID, OCR
from pipeline.formats.registered import FORMATS
from pipeline.trust.rules import VS_OCR
from pipeline.trust.table import Trust, field_class
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
    """One reading of a page both backends read, with raw scores. An OCR reading that passes its checks is the
    record's values and the VLM answer evidence, field by field: agreement makes the OCR's reading the field's
    embedded evidence, a clash keeps the OCR's value (its checks are about its values: an answer contradicting a
    passing checksum, or naming a field the OCR read as absent, is not stored over it) and fails the answer's
    check against the OCR (`rules.VS_OCR`), and a field the OCR could not read takes the answer's value and
    score. An OCR reading that fails its checks is no evidence: the answer stands alone. `cross.ocr_vs_vlm`
    passes only when the two agree on every field."""
    check = "cross.ocr_vs_vlm"
    agree = isinstance(ocr, Extraction) and all(ocr.fields.get(k) == vlm.fields.get(k) for k in FIELD_NAMES)
    if not passes_checks(ocr):
        vlm.backend = f"{PREFIX}{vlm.backend}"
        if isinstance(ocr, Extraction) and not agree:
            vlm.check_failures = sorted({*vlm.check_failures, check})
        return vlm
    assert isinstance(ocr, Extraction)
    fields, states = dict(ocr.fields), {}
    evidence, embedded, clashes = dict(vlm.evidence), dict(vlm.embedded), set()
    if fields.get("doc_type") in (None, "unknown"):
        fields["doc_type"] = vlm.fields.get("doc_type")
    for name in FIELD_NAMES:
        own, answer = ocr.field_states.get(name), vlm.fields.get(name)
        theirs = vlm.field_states.get(name)
        if own is None or own.state == "unreadable":
            fields[name] = answer
            states[name] = theirs if theirs is not None else FieldReading(
                answer, "present" if answer is not None else "unreadable", None)
            continue
        ocr_evidence = (field_class(ocr, name), own.confidence) \
            if own.state == "present" and own.confidence is not None else None
        if own.value == answer:
            states[name] = theirs if own.state == "present" and theirs is not None else own
            if ocr_evidence is not None:  # the answer's own zone proof of the same value, if any, first
                embedded.setdefault(name, ocr_evidence)
        else:  # the OCR's value, with the OCR's evidence only
            states[name] = FieldReading(own.value, own.state, None if own.state == "present" else own.confidence)
            evidence.pop(name, None)
            embedded.pop(name, None)
            if ocr_evidence is not None:
                embedded[name] = ocr_evidence
            clashes.add(VS_OCR[name])
    return replace(ocr, fields=fields, field_states=states, backend=f"{PREFIX}{vlm.backend}", model=vlm.model,
                   checks=sorted(set(ocr.checks) | ({check} if agree else set())),
                   check_failures=sorted(set(ocr.check_failures) | clashes | ({check} if not agree else set())),
                   evidence=evidence, embedded=embedded, table_key=vlm.table_key,
                   raw_response=vlm.raw_response, endpoint=vlm.endpoint, prompt_tokens=vlm.prompt_tokens,
                   completion_tokens=vlm.completion_tokens, latency_ms=ocr.latency_ms + vlm.latency_ms,
                   attempts=vlm.attempts)


class HybridBackend:
    """`ExtractionBackend` composing the OCR backend and a VLM backend (openai or vllm)."""

    name = HYBRID.name

    def __init__(self, ocr: ExtractionBackend, vlm: ExtractionBackend, *, threshold: float, route: Trust) -> None:
        """`route`: scores a copy of each OCR reading to decide whether the VLM reads the page too."""
        self._ocr, self._vlm, self._threshold, self._route = ocr, vlm, threshold, route

    @classmethod
    def from_run_settings(cls, settings: Settings) -> HybridBackend:
        vlm = HYBRID.vlm_of(settings)
        assert vlm is not None
        # the OCR half has read every page already: the VLM half does not read them with it a second time
        once = settings.model_copy(update={"openai": settings.openai.model_copy(update={"crosscheck": False})})
        return cls(OCR.build(settings), vlm.build(once), threshold=settings.hybrid_threshold,
                   route=Trust.of(settings.calibration))

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        readings = await self._ocr.extract(batch)
        escalate = [i for i, r in enumerate(readings)
                    if needs_vlm(self._route(r) if isinstance(r, Extraction) else r, self._threshold)]
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
