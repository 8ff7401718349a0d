"""Accuracy evaluation against a ground-truth manifest, through the same stages a run uses (no Prefect).

Manifests are JSON lists of items with `path` (relative to the manifest's folder), optional `page`, the
truth for `name`, `id_number`, `expiry_date` (ISO date, "long-term" or null) and optional `condition`.
Items with `expect_failure` / `expect_skip` (bad files in data/sample) are not field-scored here.
A field whose truth is null and that comes back non-null is counted as *invented*: the worst error.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure, Record
from pipeline.extract.factory import make_backend
from pipeline.ingest.discover import sha256_file
from pipeline.run import progress
from pipeline.run.engine import Engine
from pipeline.settings import Settings
from pipeline.trust.rules import ANSWER_DISAGREEMENTS, DISAGREEMENT_CAP, disagreeing_fields
from pipeline.trust.table import Calibration, field_class

THRESHOLDS = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
TARGET_PRECISION = 0.995  # the precision an auto-accept threshold must reach


@dataclass(frozen=True)
class EvalItem:
    path: Path
    rel_path: str
    page: int
    truth: dict[str, Any]
    condition: str
    doc_type: str | None = None  # the manifest's, when it says (per-kind auto-accept shares)


def load_manifest(manifest: Path, root: Path | None = None) -> list[EvalItem]:
    """The scored items of `manifest`, their paths under `root` (default: the manifest's folder)."""
    data = json.loads(manifest.read_text(encoding="utf-8"))
    items = data["items"] if isinstance(data, dict) else data
    return [
        EvalItem(path=(root or manifest.parent) / it["path"], rel_path=it["path"], page=int(it.get("page") or 0),
                 truth={k: it.get(k) for k in FIELD_NAMES}, condition=it.get("condition") or "clean",
                 doc_type=it.get("doc_type"))
        for it in items
        if "expect_failure" not in it and "expect_skip" not in it
    ]


def normalise(field_name: str, value: Any) -> str | None:
    """Compare by meaning: names ignore case, accents, fillers and spacing; numbers ignore case/spaces."""
    if value is None:
        return None
    text = str(value)
    if field_name == "name":
        text = unicodedata.normalize("NFKD", text.replace("<", " "))
        text = "".join(c for c in text if not unicodedata.combining(c))
        return " ".join(text.casefold().split())
    if field_name == "id_number":
        return "".join(text.upper().split())
    return text.strip()


@dataclass
class ItemResult:
    item: EvalItem
    predicted: dict[str, Any]
    correct: dict[str, bool]
    invented: list[str]
    confidence: float
    failure: str | None
    evidence: dict[str, tuple[str, float]] = field(default_factory=dict)  # present field -> (class, confidence)
    states: dict[str, str] = field(default_factory=dict)  # field -> present | absent | unreadable
    disagreeing: list[str] = field(default_factory=list)  # present or absent fields whose sources disagree
    calibration: str | None = None  # the table that scored it (None: unknown confidence, or raw scores)


def score_item(item: EvalItem, outcome: Record | Failure) -> ItemResult:
    if isinstance(outcome, Record):
        fields = outcome.extraction.fields
        predicted = {k: fields.get(k) for k in FIELD_NAMES}
        states = outcome.extraction.field_states
        # a field without a confidence (no table for its backend + model + prompt) is not auto-accepted, as on
        # the review page
        confidence = min(_known(states[k].confidence) if k in states else 0.0 for k in FIELD_NAMES)
        failure = None
        ex = outcome.extraction
        evidence = {k: (field_class(ex, k), states[k].confidence)
                    for k in FIELD_NAMES if k in states and states[k].state == "present"}
        state_names = {k: states[k].state for k in FIELD_NAMES if k in states}
        disagreeing = sorted(k for k in disagreeing_fields(ex.check_failures, ANSWER_DISAGREEMENTS)
                             if k in evidence or state_names.get(k) == "absent")
        table = ex.calibration
    else:
        table = None
        predicted, confidence, failure = dict.fromkeys(FIELD_NAMES), 0.0, f"{outcome.stage}/{outcome.reason}"
        evidence, state_names, disagreeing = {}, {}, []
    correct = {k: normalise(k, predicted[k]) == normalise(k, item.truth[k]) for k in FIELD_NAMES}
    invented = [k for k in FIELD_NAMES if item.truth[k] is None and predicted[k] is not None]
    return ItemResult(item, predicted, correct, invented, confidence, failure, evidence, state_names, disagreeing,
                      table)


def _known(confidence: float | None) -> float:
    return 0.0 if confidence is None else confidence


def rescored(result: ItemResult, table: Calibration) -> ItemResult:
    """A document read with raw scores, scored by `table` as a run would score it: each present field by its
    class (`Calibration.confidence`), capped where its sources disagree (`rules.DISAGREEMENT_CAP`); the document's
    confidence its least sure field, an absent field counting 1 (capped too where a source reads a value) and an
    unreadable or missing one 0, as `score_item` counts them; a failure 0."""
    if result.failure is not None:
        return dataclasses.replace(result, confidence=0.0)
    evidence = {k: (cls, min(table.confidence(cls, raw), DISAGREEMENT_CAP) if k in result.disagreeing
                    else table.confidence(cls, raw)) for k, (cls, raw) in result.evidence.items()}
    absent = {k: DISAGREEMENT_CAP if k in result.disagreeing else 1.0
              for k, state in result.states.items() if state == "absent"}
    confidence = min(evidence[k][1] if k in evidence else absent.get(k, 0.0) for k in FIELD_NAMES)
    return dataclasses.replace(result, confidence=confidence, evidence=evidence, calibration=table.table_id)


@dataclass
class EvalReport:
    results: list[ItemResult] = field(default_factory=list)

    @property
    def fields_total(self) -> int:
        return len(self.results) * len(FIELD_NAMES)

    @property
    def fields_correct(self) -> int:
        return sum(sum(r.correct.values()) for r in self.results)

    @property
    def accuracy(self) -> float:
        return self.fields_correct / self.fields_total if self.results else 0.0

    @property
    def invented(self) -> int:
        return sum(len(r.invented) for r in self.results)

    def per_field(self) -> dict[str, float]:
        n = max(len(self.results), 1)
        return {k: sum(r.correct[k] for r in self.results) / n for k in FIELD_NAMES}

    def per_condition(self) -> dict[str, tuple[int, float]]:
        groups: dict[str, list[ItemResult]] = defaultdict(list)
        for r in self.results:
            groups[r.item.condition].append(r)
        return {c: (len(rs), sum(sum(r.correct.values()) for r in rs) / (len(rs) * len(FIELD_NAMES)))
                for c, rs in sorted(groups.items())}

    def auto_accept(self) -> list[tuple[float, int, float]]:
        """(threshold, documents accepted, precision = share of accepted documents with every field right)."""
        rows = []
        for t in THRESHOLDS:
            accepted = [r for r in self.results if r.failure is None and r.confidence >= t]
            ok = sum(all(r.correct.values()) for r in accepted)
            rows.append((t, len(accepted), ok / len(accepted) if accepted else 1.0))
        return rows

    def precision_coverage(self) -> list[tuple[float, float, float]]:
        """The precision/coverage curve: for each distinct document confidence t (highest first), the share
        of all documents auto-accepted at threshold t (coverage) and the share of those fully right."""
        ranked = sorted((r for r in self.results if r.failure is None), key=lambda r: -r.confidence)
        curve: list[tuple[float, float, float]] = []
        ok = 0
        for i, r in enumerate(ranked, start=1):
            ok += all(r.correct.values())
            if i == len(ranked) or ranked[i].confidence != r.confidence:
                curve.append((r.confidence, i / len(self.results), ok / i))
        return curve

    def operating_point(self, target: float = TARGET_PRECISION) -> tuple[float, float, float] | None:
        """The lowest threshold at which precision is >= `target` there and at every higher threshold, with
        (threshold, coverage, precision); None when even the most confident documents miss the target."""
        point = None
        for t, coverage, precision in self.precision_coverage():
            if precision < target:
                break
            point = (t, coverage, precision)
        return point

    def accepted_at(self, threshold: float) -> tuple[float, float, int]:
        """(share of all documents auto-accepted at `threshold`, precision of those, how many)."""
        accepted = [r for r in self.results if r.failure is None and r.confidence >= threshold]
        ok = sum(all(r.correct.values()) for r in accepted)
        return (len(accepted) / len(self.results) if self.results else 0.0,
                ok / len(accepted) if accepted else 1.0, len(accepted))

    def per_doc_type(self, threshold: float) -> dict[str, dict[str, Any]]:
        """Per document kind (the manifest's doc_type): documents, share auto-accepted, precision of those."""
        return self._accepted_by(lambda r: r.item.doc_type or "unstated", threshold)

    def per_condition_at(self, threshold: float) -> dict[str, dict[str, Any]]:
        """Per capture condition (the manifest's): documents, share auto-accepted at `threshold`, precision."""
        return self._accepted_by(lambda r: r.item.condition, threshold)

    def _accepted_by(self, group: Callable[[ItemResult], str], threshold: float) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[ItemResult]] = defaultdict(list)
        for r in self.results:
            groups[group(r)].append(r)
        out = {}
        for name, rs in sorted(groups.items()):
            share, precision, n = EvalReport(rs).accepted_at(threshold)
            out[name] = {"documents": len(rs), "accepted": n, "share": round(share, 4),
                         "precision": round(precision, 4)}
        return out

    def per_evidence_class(self, threshold: float) -> dict[str, dict[str, Any]]:
        """Per evidence class of a present field: how many fields, how many right, how many reach `threshold`
        (and how many of those are right), and how many documents it alone holds back from being auto-accepted
        (every other field of the document reaches the threshold)."""
        rows: dict[str, dict[str, Any]] = defaultdict(lambda: {"fields": 0, "right": 0, "passing": 0,
                                                               "passing_right": 0, "holds_back": 0})
        for r in self.results:
            if r.failure is not None:
                continue
            below = [k for k, (_, conf) in r.evidence.items() if _known(conf) < threshold]
            for k, (cls, conf) in r.evidence.items():
                row = rows[cls]
                row["fields"] += 1
                row["right"] += r.correct[k]
                if _known(conf) >= threshold:
                    row["passing"] += 1
                    row["passing_right"] += r.correct[k]
                elif below == [k] and r.confidence >= _known(conf):  # no field that is not present is lower
                    row["holds_back"] += 1
        return {cls: {**row, "precision": round(row["passing_right"] / row["passing"], 4) if row["passing"] else None}
                for cls, row in sorted(rows.items())}

    def misses(self) -> list[dict[str, Any]]:
        return [
            {"path": r.item.rel_path, "condition": r.item.condition, "failure": r.failure,
             **{k: {"truth": r.item.truth[k], "got": r.predicted[k]} for k in FIELD_NAMES if not r.correct[k]}}
            for r in self.results if not all(r.correct.values())
        ]

    def as_dict(self, threshold: float | None = None) -> dict[str, Any]:
        """The report as JSON; `threshold`: the auto-accept threshold the shares are given at (the review
        page's, `IDFLOW_REVIEW_THRESHOLD`, by default)."""
        if threshold is None:
            from pipeline.settings import ReviewSettings

            threshold = ReviewSettings().threshold
        share, precision, accepted = self.accepted_at(threshold)
        return {
            "documents": len(self.results),
            "fields_total": self.fields_total,
            "fields_correct": self.fields_correct,
            "accuracy": round(self.accuracy, 4),
            "invented_where_absent": self.invented,
            "per_field": {k: round(v, 4) for k, v in self.per_field().items()},
            "per_condition": {c: {"documents": n, "accuracy": round(a, 4)} for c, (n, a) in
                              self.per_condition().items()},
            "auto_accept": [{"threshold": t, "accepted": n, "precision": round(p, 4)}
                            for t, n, p in self.auto_accept()],
            "precision_coverage": [{"threshold": t, "coverage": round(c, 4), "precision": round(p, 4)}
                                   for t, c, p in self.precision_coverage()],
            "operating_point": dict(zip(("threshold", "coverage", "precision"), point))
            if (point := self.operating_point()) else None,
            "tables": sorted({r.calibration or "none (confidence unknown)" for r in self.results
                              if r.failure is None}),
            "at_threshold": {"threshold": threshold, "accepted": accepted, "share": round(share, 4),
                             "precision": round(precision, 4)},
            "per_doc_type": self.per_doc_type(threshold),
            "per_condition_at_threshold": self.per_condition_at(threshold),
            "per_evidence_class": self.per_evidence_class(threshold),
            "misses": self.misses(),
            # per document, for refitting/checking the calibration offline (tools/fit_calibration.py): no values
            "documents_scored": [{"path": r.item.rel_path, "condition": r.item.condition, "failure": r.failure,
                                  "confidence": r.confidence, "correct": r.correct,
                                  "states": r.states, "evidence": {k: list(v) for k, v in r.evidence.items()},
                                  "disagreeing": r.disagreeing}
                                 for r in self.results],
        }


async def evaluate(items: list[EvalItem], settings: Settings) -> EvalReport:
    """Run every manifest item through the engine (prepare -> extract -> validate) and score it against its truth.
    Results are reported in manifest order, whatever order the documents finish in."""
    position = {(item.rel_path, item.page): i for i, item in enumerate(items)}
    refs = (DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
            for item in items)  # a generator: the engine hashes the files in a thread as it goes
    scored: list[tuple[int, ItemResult]] = []
    async with Engine(settings, make_backend(settings)) as engine:
        async for outcome in engine.run(refs):
            ref = outcome.extraction.ref if isinstance(outcome, Record) else outcome
            index = position[(ref.rel_path, ref.page)]
            scored.append((index, score_item(items[index], outcome)))  # type: ignore[arg-type]
            progress.report(len(scored), len(items))
    return EvalReport([result for _, result in sorted(scored, key=lambda pair: pair[0])])
