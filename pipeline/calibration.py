"""Calibrated field confidence: turn the OCR reading's raw score into "how often a field like this is right".

Why: the raw score multiplies recognition scores with check-digit and cross-check factors; it ranks readings
well but its value means nothing by itself (a 0.99 name line could be wrong). A field's chance of being right
depends mostly on its *evidence*: a document number whose MRZ check digit passed is almost always right, an
MRZ name confirmed by the printed zone nearly so, a name taken from the printed zone by position much less.
So each present field gets an evidence class (`evidence_class`), and within a class an isotonic (monotone,
step-wise) map from raw score to the observed share of right values, fitted on generated tuning sets by
`tools/fit_calibration.py` and shipped as `calibration_table.json`.

A class the table has never seen keeps its raw score but capped at `unseen_cap`, so it can never be
auto-accepted on a number nobody measured.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from pipeline.confidence_rules import cap_disagreements
from pipeline.datamodel import Extraction, FieldReading
from pipeline.fields.formats import FORMATS

TABLE_NAME = "calibration_table.json"


def evidence_class(field: str, doc_type: str | None, checks: list[str], failures: list[str]) -> str:
    """The kind of evidence behind one present field, from the checks its reading passed or failed: each
    document format names the classes of its own evidence (`DocumentFormat.evidence_source`)."""
    return f"{field}/{FORMATS.evidence_source(field, doc_type, checks, failures)}"


@dataclass(frozen=True, slots=True)
class Curve:
    """A step function: raw scores from `edges[i]` up to the next edge map to `values[i]` (non-decreasing)."""

    edges: tuple[float, ...]
    values: tuple[float, ...]
    counts: tuple[int, ...]

    def __call__(self, raw: float) -> float:
        i = bisect.bisect_right(self.edges, raw) - 1
        return self.values[max(i, 0)]


@dataclass(frozen=True, slots=True)
class Calibration:
    curves: dict[str, Curve]
    unseen_cap: float

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        curves = {k: Curve(tuple(v["edges"]), tuple(v["values"]), tuple(v["counts"]))
                  for k, v in data["classes"].items()}
        return cls(curves, float(data["unseen_cap"]))

    @classmethod
    def load(cls, path: Path | None = None) -> Calibration:
        text = path.read_text(encoding="utf-8") if path else files("pipeline").joinpath(TABLE_NAME).read_text("utf-8")
        return cls.from_dict(json.loads(text))

    def confidence(self, cls_name: str, raw: float) -> float:
        curve = self.curves.get(cls_name)
        return round(curve(raw), 4) if curve else min(raw, self.unseen_cap)

    def apply(self, extraction: Extraction) -> Extraction:
        """The extraction with every present field's confidence calibrated (absent/unreadable unchanged), then
        the rules no table overrides (`confidence_rules.cap_disagreements`)."""
        doc_type = extraction.fields.get("doc_type")
        states = dict(extraction.field_states)
        for name, reading in states.items():
            if reading.state == "present":
                cls_name = evidence_class(name, doc_type, extraction.checks, extraction.check_failures)
                states[name] = FieldReading(reading.value, "present", self.confidence(cls_name, reading.confidence))
        return cap_disagreements(dataclasses.replace(extraction, field_states=states))


@cache
def shipped() -> Calibration:
    """The table shipped in the package (refit with tools/fit_calibration.py)."""
    return Calibration.load()
