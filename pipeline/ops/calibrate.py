"""`idflow calibrate`: fit the confidence table of one backend + model + prompt from the user's labelled documents.

The documents of a ground-truth manifest (the format of `idflow eval`) are read through the configured backend and
endpoint with raw scores (`CalibrationSettings.raw_scores`), each present field becomes one observation (its
evidence class, raw score, right or wrong), `calibration_fit.fit` fits the isotonic table and it is stored under
its key in `IDFLOW_CALIBRATION_DIR`, where every later run of the same backend + model + prompt finds it.

How many documents, and why (`MIN_DOCUMENTS`): each step of a class gets the lower end of the 95% Wilson interval
of its share right, so even a class that is always right needs 73 observations before its confidence reaches the
0.95 threshold; fewer than `MIN_DOCUMENTS` scored documents cannot make a table worth storing, and the fit is
refused. To *state* 99.5% precision with 95% confidence, about 600 documents without an error are needed (the
rule of three: 3 / 600 = 0.5%), so a real calibration set should have several hundred documents of the kinds the
user reads. The curve printed here is measured on the documents the table was fitted on (in-sample, optimistic);
`idflow eval` on other documents measures it honestly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from pipeline.extract.model.openai_compat import prompt_key
from pipeline.extract.registry import backend_spec, model_name
from pipeline.ops.evaluation import EvalItem, EvalReport, evaluate, rescored
from pipeline.settings import Settings
from pipeline.trust.fit import fit
from pipeline.trust.key import TableKey, ocr_key
from pipeline.trust.table import Calibration, Tables

MIN_DOCUMENTS = 40


class TooFewDocuments(ValueError):
    """The manifest gives too few scored documents to fit a table (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class ClassFit:
    """One evidence class as observed: how often its fields were right, with a 95% Wilson interval."""

    name: str
    seen: int
    right: int
    low: float
    high: float
    best: float  # the highest confidence the fitted table gives this class


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    key: TableKey
    path: Path
    documents: int
    classes: list[ClassFit]
    report: EvalReport  # the documents re-scored with the fitted table (in-sample)


def table_key(settings: Settings) -> TableKey:
    """The key a run with these settings scores with: the backend kind, its model id and, for a VLM, the prompt."""
    spec = backend_spec(settings.backend)
    if spec.escalates:
        raise ValueError(f"the {spec.name} backend combines two readings; calibrate its parts (ocr and "
                         f"{settings.hybrid_vlm}) instead")
    if not spec.is_vlm:
        return ocr_key()
    return TableKey(spec.name, model_name(settings), prompt_key(settings.openai.prompt_lang))


def wilson(right: int, seen: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a proportion."""
    if seen == 0:
        return 0.0, 1.0
    p = right / seen
    centre = (p + z * z / (2 * seen)) / (1 + z * z / seen)
    half = z * math.sqrt(p * (1 - p) / seen + z * z / (4 * seen * seen)) / (1 + z * z / seen)
    return max(0.0, centre - half), min(1.0, centre + half)


def observations(report: EvalReport, name: str) -> list[dict]:
    """One observation per present field of every document read: (class, raw score, right)."""
    return [{"manifest": name, "condition": r.item.condition, "field": k, "class": cls, "raw": raw,
             "correct": r.correct[k]}
            for r in report.results if r.failure is None for k, (cls, raw) in r.evidence.items()]


async def calibrate(items: list[EvalItem], settings: Settings, name: str) -> CalibrationResult:
    """Read `items` with raw scores, fit and store the table of this backend + model + prompt."""
    key = table_key(settings)
    raw = settings.model_copy(update={"calibration": settings.calibration.model_copy(update={"raw_scores": True})})
    report = await evaluate(items, raw)
    scored = sum(r.failure is None for r in report.results)
    if scored < MIN_DOCUMENTS:
        raise TooFewDocuments(f"{scored} of {len(items)} documents were read; a table needs at least "
                              f"{MIN_DOCUMENTS} (see docs/accuracy.md: how many documents calibrate needs)")
    obs = observations(report, name)
    table = fit(obs)
    classes = []
    for cls in sorted(table["classes"]):
        seen = sum(o["class"] == cls for o in obs)
        right = sum(o["class"] == cls and o["correct"] for o in obs)
        low, high = wilson(right, seen)
        classes.append(ClassFit(cls, seen, right, round(low, 4), round(high, 4), max(table["classes"][cls]["values"])))
    table["intervals"] = {c.name: {"observations": c.seen, "right": c.right, "low": c.low, "high": c.high}
                          for c in classes}
    path = Tables(settings.calibration.dir).save(key, table)
    fitted = Calibration.load(path)
    # in-sample: the documents the table was fitted on, scored by it
    return CalibrationResult(key, path, scored, classes, EvalReport([rescored(r, fitted) for r in report.results]))
