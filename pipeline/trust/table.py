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

**One keyed model for every backend.** A table is fitted for one (backend, model id, prompt version)
(`TableKey`): what a model answers, and how often it is right, changes with each of them. The shipped table is
the embedded OCR's (a table file without a `key` is read as that one); a user's tables (`idflow calibrate`) are
stored in `IDFLOW_CALIBRATION_DIR` (`Tables`), one file per key, and are found before the shipped one. A
backend's extractions are scored by the table of their key (`Scorer`); when no table has that key, every
present field's confidence stays **unknown** (None: the record goes to a person), never a made-up number. The
table that scored a record is stored with it (the `calibration` column: key and content hash).

Calibration is deliberately not part of the settings fingerprint: a refit changes what a confidence means, not
what was read, so it must not make every document eligible for re-reading. A run scores with the table present
when it runs; the `calibration` column tells which.

**The embedded floor.** A model's field that the embedded path has evidence for, the same value proven by the
answer's own check digits or read alike by the embedded OCR (`Extraction.embedded`: that evidence's class and raw
score), gets at least the confidence the embedded path's table (the user's OCR table, else the shipped one) gives
that evidence (`floored`), with or without a table for the model: a new model id starts with the embedded path's
auto-accept share, never below. A field only the model read keeps what the model's table says (unknown without
one).

A field whose sources disagree is never auto-accepted, whatever a table says: after a table and the floor are
applied, the rule of `pipeline.trust.rules` caps it (the formats' disagreements, and a VLM answer's against
its own zone, printed copies and the embedded OCR); a class `.../disagrees` is capped wherever a confidence is
looked up by class.

**Applied once, after validation, for every backend.** A backend returns raw scores, the evidence behind them
and the key of the table that measures them (`Extraction.table_key`); the validate stage (`Trust`, called by
`pipeline.run.engine.finish`) then applies, in order: `Calibration.apply` (the table of the key) or `unknown`,
`floored`, and `rules.cap_disagreements`. So a value validation refuted is never scored, and a rule is applied
in one place whatever read the page. The hybrid backend scores a copy of the OCR's reading only to decide which
pages to send to the model (`Trust` again); what it stores is scored like any other reading.

A new evidence class is one entry in one place: the document format that has the evidence names it
(`DocumentFormat.evidence_source`; a VLM answer's in `pipeline.extract.model.answer_evidence`), and a refit
(`tools/fit_calibration.py`, `idflow calibrate`) measures it; until then it is capped (`unseen_cap`).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.datamodel import Extraction, FieldReading
from pipeline.formats.registered import FORMATS
from pipeline.store.atomic import write_json_atomic
from pipeline.trust.key import TableKey, ocr_key
from pipeline.trust.rules import ANSWER_DISAGREEMENTS, cap_disagreements, ceiling

if TYPE_CHECKING:
    from pipeline.settings import CalibrationSettings

TABLE_NAME = "calibration_table.json"
log = logging.getLogger(__name__)


def evidence_class(field: str, doc_type: str | None, checks: list[str], failures: list[str]) -> str:
    """The kind of evidence behind one present field, from the checks its reading passed or failed: each
    document format names the classes of its own evidence (`DocumentFormat.evidence_source`)."""
    return f"{field}/{FORMATS.evidence_source(field, doc_type, checks, failures)}"


def field_class(extraction: Extraction, name: str) -> str:
    """The evidence class of one present field: the backend's own (`Extraction.evidence`, a VLM answer's), else
    the one its checks give."""
    return extraction.evidence.get(name) or evidence_class(
        name, extraction.fields.get("doc_type"), extraction.checks, extraction.check_failures)


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
    key: TableKey | None = None  # None: the embedded OCR's (`ocr_key()`)
    digest: str = ""  # hash of the table's content, stored with every record it scored

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        curves = {k: Curve(tuple(v["edges"]), tuple(v["values"]), tuple(v["counts"]))
                  for k, v in data["classes"].items()}
        key = TableKey.from_dict(data["key"]) if isinstance(data.get("key"), dict) else None
        digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]
        return cls(curves, float(data["unseen_cap"]), key, digest)

    @classmethod
    def load(cls, path: Path | None = None) -> Calibration:
        shipped_file = files("pipeline.trust").joinpath(TABLE_NAME)
        text = path.read_text(encoding="utf-8") if path else shipped_file.read_text("utf-8")
        return cls.from_dict(json.loads(text))

    @property
    def table_key(self) -> TableKey:
        return self.key or ocr_key()

    @property
    def table_id(self) -> str:
        """Which table scored a record (`calibration` column): its key and content hash."""
        return f"{self.table_key.label}#{self.digest}"

    def confidence(self, cls_name: str, raw: float) -> float:
        curve = self.curves.get(cls_name)
        value = round(curve(raw), 4) if curve else min(raw, self.unseen_cap)
        return ceiling(cls_name, value, self.unseen_cap)

    def apply(self, extraction: Extraction, embedded: Calibration | None = None) -> Extraction:
        """The extraction with every present field's confidence calibrated (absent/unreadable unchanged), then
        the floor of the embedded path's evidence (`floored`, when `embedded` is given), then the rule no table
        overrides (`rules.cap_disagreements`)."""
        states = dict(extraction.field_states)
        for name, reading in states.items():
            if reading.state == "present" and reading.confidence is not None:
                states[name] = FieldReading(reading.value, "present",
                                            self.confidence(field_class(extraction, name), reading.confidence))
        scored = dataclasses.replace(extraction, field_states=states, calibration=self.table_id)
        return cap_disagreements(floored(scored, embedded), extra=ANSWER_DISAGREEMENTS)


def unknown(extraction: Extraction, embedded: Calibration | None = None) -> Extraction:
    """The extraction with every present field's confidence unknown (None): no table was fitted for its key;
    then the floor of the embedded path's evidence (`floored`) and the rule no table overrides."""
    states = {name: FieldReading(r.value, r.state, None) if r.state == "present" else r
              for name, r in extraction.field_states.items()}
    scored = dataclasses.replace(extraction, field_states=states, calibration=None)
    return cap_disagreements(floored(scored, embedded), extra=ANSWER_DISAGREEMENTS)


FLOOR = "floor:"  # in the `calibration` column: the embedded table that set a floor


def floored(extraction: Extraction, embedded: Calibration | None) -> Extraction:
    """The extraction with every present field that has embedded evidence (`Extraction.embedded`) raised to the
    confidence `embedded` (the embedded path's table) gives that evidence; unchanged without such a table or
    evidence. The `calibration` column then names that table too (`floor:<key>#<hash>`)."""
    if embedded is None or not extraction.embedded:
        return extraction
    states = dict(extraction.field_states)
    raised = False
    for name, (cls_name, raw) in extraction.embedded.items():
        reading = states.get(name)
        if reading is None or reading.state != "present":
            continue
        floor = embedded.confidence(cls_name, raw)
        if reading.confidence is None or reading.confidence < floor:
            states[name] = FieldReading(reading.value, "present", floor)
            raised = True
    if not raised:
        return extraction
    table = ";".join(x for x in (extraction.calibration, FLOOR + embedded.table_id) if x)
    return dataclasses.replace(extraction, field_states=states, calibration=table)


@cache
def shipped() -> Calibration:
    """The table shipped in the package (refit with tools/fit_calibration.py)."""
    return Calibration.load()


class Tables:
    """Where tables are found: the user's directory (one file per key, written by `idflow calibrate`), then the
    shipped table."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    def path_for(self, key: TableKey) -> Path | None:
        return self.directory / key.file_name() if self.directory is not None else None

    def find(self, key: TableKey) -> Calibration | None:
        path = self.path_for(key)
        if path is not None and path.is_file():
            table = Calibration.load(path)
            if table.table_key == key:
                return table
        table = shipped()
        return table if table.table_key == key else None

    def save(self, key: TableKey, table: dict[str, Any]) -> Path:
        """Store a fitted table (`calibration_fit.fit`'s output) under its key; the path written."""
        path = self.path_for(key)
        if path is None:
            raise ValueError("no calibration directory set (IDFLOW_CALIBRATION_DIR)")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {**table, "key": key.as_dict()})
        return path


@dataclass(frozen=True, slots=True)
class Scorer:
    """Scores one backend's extractions: with the table of its key, unknown without one, or left raw (`raw`:
    the scores a table is fitted on, for `idflow calibrate`); never below the floor the embedded path's table
    (`embedded`) gives a field's embedded evidence (`floored`).

    A user's table for the embedded reader's key that has never seen a class the shipped table measures was
    fitted before the reader named that evidence: its fields (and a model's floors from it) are capped
    (`unseen_cap`) until the table is fitted again, and the first field of each such class says so in a warning
    (`_warn_unseen`), since the share of documents auto-accepted drops for a reason no record shows."""

    key: TableKey
    table: Calibration | None
    raw: bool = False
    embedded: Calibration | None = None

    @classmethod
    def for_key(cls, key: TableKey, directory: Path | None, *, raw: bool = False) -> Scorer:
        if raw:
            return cls(key, None, raw)
        tables = Tables(directory)
        return cls(key, tables.find(key), raw, tables.find(ocr_key()))

    def __call__(self, extraction: Extraction) -> Extraction:
        if self.raw:
            return extraction
        # generators: a field's class is drawn only for a user's table of the shipped key, not on every reading
        _warn_unseen(self.embedded, (cls_name for cls_name, _ in extraction.embedded.values()))
        if self.table is not None:
            _warn_unseen(self.table, (field_class(extraction, name) for name, reading in
                                      extraction.field_states.items() if reading.state == "present"))
            return self.table.apply(extraction, self.embedded)
        return unknown(extraction, self.embedded)


_warned: set[tuple[str, str]] = set()  # (table id, class): once per process
_warned_lock = threading.Lock()


def _warn_unseen(table: Calibration | None, classes: Iterable[str]) -> None:
    """Warn, once per table and class, of `classes` that a user's table of the shipped table's key has never seen
    and the shipped table measures; nothing for the shipped table itself or another key's table."""
    if table is None or table is shipped() or table.table_key != shipped().table_key:
        return
    for cls_name in classes:
        if cls_name in table.curves or cls_name not in shipped().curves:
            continue
        with _warned_lock:
            if (table.table_id, cls_name) in _warned:
                continue
            _warned.add((table.table_id, cls_name))
        log.warning("the calibration table %s has never seen the evidence class %s, which this version of the "
                    "embedded reader gives and the shipped table measures: such fields stay below the auto-accept "
                    "threshold until `idflow calibrate` fits the table again", table.table_id, cls_name)


class Trust:
    """Every reading's confidence, decided in one place: each extraction is scored by the table of its key
    (`Extraction.table_key`; None: the embedded OCR's), found in `directory` (the user's tables, then the shipped
    one) once per key, never below the embedded floor, rules last (`Scorer`). `raw`: leave the raw scores (what
    a table is fitted on)."""

    def __init__(self, directory: Path | None, *, raw: bool = False) -> None:
        self.directory = directory
        self.raw = raw
        self._scorers: dict[TableKey, Scorer] = {}
        self._lock = threading.Lock()

    @classmethod
    def of(cls, calibration: CalibrationSettings) -> Trust:
        """The trust a run with these settings scores with."""
        return cls(calibration.dir, raw=calibration.raw_scores)

    def scorer(self, key: TableKey) -> Scorer:
        with self._lock:  # readings are scored from several threads; a table file is read once
            found = self._scorers.get(key)
            if found is None:
                found = self._scorers[key] = Scorer.for_key(key, self.directory, raw=self.raw)
            return found

    def __call__(self, extraction: Extraction) -> Extraction:
        return self.scorer(extraction.table_key or ocr_key())(extraction)
