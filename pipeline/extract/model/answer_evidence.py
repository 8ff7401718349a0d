"""What a VLM answer proves about itself, checked by idflow: its machine-readable zone, its printed copies and its
token probabilities.

A model's field values carry no evidence of their own: a fluent answer can be wrong. So the prompt
(`extract_v3`) also asks for the zone's lines verbatim (`mrz`) and for the name and number as printed in the
visual zone (`printed`), and the request asks for token log-probabilities. idflow then checks them itself:

- **The zone** is decoded by the same zone formats the OCR path uses (`FORMATS`, `ZoneFormat.find_zone`), so
  check digits prove or refute the answer's number and expiry under the same check names (`mrz.number`,
  `mrz.expiry`, ...). Per field: the zone's value passes its check digit and equals the answer's -> the check is
  in `checks` (proven; the answer's number is given to the zone reader as the printed text, so a zone the
  model misread is confirmed when the answer's number passes its check digit, as on the OCR path); it passes
  and differs -> a disagreement (a look-alike reading of the zone the digit chose instead is unconfirmed,
  `repair.mrz_number_unconfirmed`, as on the OCR path) (`cross.*_answer_vs_mrz`: the zone contradicts
  the answer); it fails and equals the answer's -> the check is in `check_failures` (refuted: both copies say
  what the digit denies, which the validate stage treats as for the OCR path); it fails and differs -> the
  model garbled its own transcription, which is no evidence either way. So a garbled zone never makes a record
  fail that would have passed without it, unless it contradicts the value. The zone's name is compared with
  the answer's (`cross.name_mrz_vs_viz`); a zone name closed by fillers is complete, so a longer answer name is
  a disagreement, and only a zone whose name field is full (no closing filler) may be continued by the print.
- **The printed copies** are compared with the answer's values (`cross.name_answer_vs_printed`,
  `cross.number_answer_vs_printed`). They are the same reading of the same glyphs, so agreement proves little;
  disagreement means the model is unsure.
- **The embedded OCR's reading** (on by default, `IDFLOW_OPENAI_CROSSCHECK`; `pipeline.extract.model.ocr_crosscheck`):
  the fields no check proves (`unproven`: a PRC card's name and validity, a name its zone does not confirm, a
  number or expiry no check digit covers) are compared with what the embedded OCR reads on the same page, an
  independent reading by another method (`cross.*_answer_vs_ocr`). Agreement puts the field in a class of its
  own (`field/<source>+ocr/...`), so a table learns how often two readings that agree are right; the OCR seeing
  another value, or no value where the answer has one, is a disagreement; the OCR unable to read the field is no
  evidence either way.
- **The embedded path's evidence for the same value** (`Judged.embedded`, field -> (embedded class, raw score)):
  a field the answer's own checks prove (`proven`) has the evidence an embedded reading of that class has (the
  class named without `/lp`, at the raw score of a sure reading, 1.0: a model's score is on no scale the
  embedded table knows, and the check, not the score, is the evidence); a field the embedded OCR read alike has
  that reading's class and raw score. The embedded table's confidence for it is the field's floor
  (`pipeline.trust.table.floored`), which needs no table for the model.
- **Token probabilities**: the lowest probability of the tokens that spell a field's value is its raw score
  (1.0 when the endpoint gave none). The evidence class says which (`/lp` or `/nolp`), so a table fitted with
  log-probabilities is never applied to scores made without them.

Every present field gets an evidence class (`field/<source>/<lp|nolp>`, the source as `FORMATS.evidence_source`
names it, or `field/disagrees` when its sources contradict each other), which the keyed calibration table of
the backend + model + prompt turns into a probability (`pipeline.trust.table`); a disagreement is never
auto-accepted, whatever the table says.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Sequence

from pipeline.datamodel import FIELD_NAMES, FieldReading
from pipeline.extract.model.answer_parsing import normalised
from pipeline.formats.lines import fold, same_name
from pipeline.formats.mrz import NAME_FILLERS_CHECK, NUMBER_UNCONFIRMED_CHECK
from pipeline.formats.registered import FORMATS, NAME_EXTENDED_CHECK, ZoneFields, ZoneFormat
from pipeline.formats.zone import issuer_code
from pipeline.trust.rules import (
    DISAGREEMENTS,
    DISAGREES,
    EXPIRY_VS_ZONE,
    NAME_VS_PRINTED,
    NAME_VS_ZONE,
    NUMBER_VS_PRINTED,
    NUMBER_VS_ZONE,
    VS_OCR,
)
from pipeline.trust.table import evidence_class

EVIDENCE_KEYS = ("mrz", "printed")  # answer keys that are evidence, not fields of the record
OCR_AGREES = "+ocr"  # appended to a field's evidence source when the OCR read the same value
# The JSON schema of the evidence keys, added to the project schema in `response_format`.
EVIDENCE_SCHEMA: dict[str, Any] = {
    "mrz": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
    "printed": {"anyOf": [{"type": "object", "additionalProperties": False, "required": ["name", "id_number"],
                           "properties": {"name": {"type": ["string", "null"]},
                                          "id_number": {"type": ["string", "null"]}}},
                          {"type": "null"}]},
}


@dataclass(frozen=True, slots=True)
class AnswerEvidence:
    """The evidence keys of one answer: the zone's lines (None: the model saw no zone or the answer has none) and
    the printed copies of the name and number (normalised like the fields)."""

    mrz: tuple[str, ...] | None = None
    printed: dict[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Judged:
    """What the evidence says about an answer's fields: checks passed and failed, each field's reading with its
    raw score, each present field's evidence class, and the checks that refute a value (for the repair turn)."""

    checks: list[str]
    failures: list[str]
    states: dict[str, FieldReading]
    classes: dict[str, str]
    refuted: list[str]
    lp: str = "nolp"  # whether the raw scores are token probabilities (`lp`) or none were given (`nolp`)
    issuer: str | None = None  # the answer's zone's issuer code, else the one state issuing its doc type
    embedded: dict[str, tuple[str, float]] = field(default_factory=dict)  # the embedded path's evidence (above)


def split_answer(answer: dict[str, Any]) -> tuple[dict[str, Any], AnswerEvidence]:
    """The answer's record fields (what the schema validates) and its evidence keys. A malformed evidence key is
    no evidence, never an error: the fields are judged as if it were absent."""
    fields = {k: v for k, v in answer.items() if k not in EVIDENCE_KEYS}
    raw_mrz = answer.get("mrz")
    lines = None
    if isinstance(raw_mrz, list) and raw_mrz and all(isinstance(x, str) for x in raw_mrz):
        lines = tuple("".join(unicodedata.normalize("NFKC", x).split()).upper() for x in raw_mrz)
        lines = tuple(x for x in lines if x) or None
    raw_printed = answer.get("printed")
    printed: dict[str, str | None] = {}
    if isinstance(raw_printed, dict):
        copies = normalised({k: raw_printed.get(k) for k in ("name", "id_number")})
        printed = {k: v if isinstance(v, str) and v else None for k, v in copies.items()}
    return fields, AnswerEvidence(lines, printed)


def judge(fields: dict[str, Any], evidence: AnswerEvidence, scores: dict[str, float] | None,
          today: date | None = None) -> Judged:
    """Check an answer's fields against its evidence (module docstring). `scores`: field -> lowest token
    probability of its value, None when the endpoint gave no log-probabilities."""
    today = today or date.today()
    checks: list[str] = []
    failures: list[str] = []
    refuted: list[str] = []
    number = fields.get("id_number")
    # the answer's number is the printed text the OCR path reads beside the zone: a zone misread by the model is
    # confirmed by the answer's number when that passes the zone's check digit
    found = _zone(evidence.mrz, [number] if isinstance(number, str) else [], today) if evidence.mrz else None
    if found is not None:
        fmt, zone = found
        _zone_number(zone, fields.get("id_number"), checks, failures, refuted)
        _zone_expiry(fmt, zone, fields.get("expiry_date"), checks, failures, refuted)
        _zone_name(zone, evidence.mrz or (), fields.get("name"), checks, failures)
        checks += [c for c in zone.checks_passed if c not in ("mrz.number", fmt.expiry_check) and c not in checks]
    _printed(fields, evidence, found[1] if found else None, checks, failures)
    number_check = _number_check(fields)
    if number_check is not None:
        checks.append(number_check)
    states = {name: _reading(fields.get(name), scores, name) for name in FIELD_NAMES}
    doc_type = fields.get("doc_type")
    lp = "lp" if scores is not None else "nolp"
    issuer = (issuer_code(found[1].issuer) if found else None) or FORMATS.issuer_of(doc_type)
    classes = _classes(states, doc_type, checks, failures, lp)
    proven = _proven(fields, checks)
    embedded = {name: (cls.rsplit("/", 1)[0], 1.0) for name, cls in classes.items()
                if proven[name] and not cls.endswith("/" + DISAGREES)}
    return Judged(checks, failures, states, classes, refuted, lp, issuer, embedded)


def _classes(states: dict[str, FieldReading], doc_type: Any, checks: list[str], failures: list[str],
             lp: str) -> dict[str, str]:
    return {name: answer_class(name, doc_type, checks, failures, lp)
            for name, reading in states.items() if reading.state == "present"}


def answer_class(name: str, doc_type: Any, checks: list[str], failures: list[str], lp: str) -> str:
    """A model answer's field class: `field/disagrees` when the field's sources contradict each other, else the
    embedded path's class of the same evidence (`trust.table.evidence_class`) with `+ocr` when the embedded OCR read
    the same value and `/<lp|nolp>` (whether token probabilities scored it)."""
    if any(c in failures for c in DISAGREEMENTS[name]):
        return f"{name}/{DISAGREES}"
    base = evidence_class(name, doc_type if isinstance(doc_type, str) else None, checks, failures)
    return f"{base}{OCR_AGREES if VS_OCR[name] in checks else ''}/{lp}"


# Checks that prove a field by themselves: a check digit over the value, or the zone agreeing with the answer.
_ZONE_EXPIRY_CHECKS = frozenset(fmt.expiry_check for fmt in FORMATS if isinstance(fmt, ZoneFormat))


def _proven(fields: dict[str, Any], checks: list[str]) -> dict[str, bool]:
    """Which fields the answer's own checks prove: a name its zone agreeing with it; a number the zone's check
    digit or its own checksum (MOD 11-2, ...); an expiry date the zone's check digit."""
    return {"name": NAME_VS_ZONE in checks,
            "id_number": "mrz.number" in checks or _number_check(fields) in checks,
            "expiry_date": bool(_ZONE_EXPIRY_CHECKS & set(checks))}


def unproven(fields: dict[str, Any], judged: Judged) -> list[str]:
    """The answer's present fields no check proves (`_proven`): worth an independent reading. A field whose
    sources already disagree goes to a person anyway."""
    proven = _proven(fields, judged.checks)
    return [name for name, reading in judged.states.items() if reading.state == "present"
            and not proven[name] and not judged.classes.get(name, "").endswith("/" + DISAGREES)]


def with_ocr_reading(fields: dict[str, Any], judged: Judged, ocr: dict[str, FieldReading],
                     names: Sequence[str], ocr_classes: dict[str, str] | None = None) -> Judged:
    """`judged` with the embedded OCR's reading of the same page (`ocr`: field -> its reading, raw scores;
    `ocr_classes`: field -> the reading's evidence class) compared on `names` (module docstring): the same value
    passes `cross.*_answer_vs_ocr` and gives the field the OCR reading's class and raw score as its embedded
    evidence, another value or none where the answer has one fails it, an unreadable field adds nothing. The
    classes are computed again."""
    checks, failures = list(judged.checks), list(judged.failures)
    embedded = dict(judged.embedded)
    for name in names:
        own, answer = ocr.get(name), fields.get(name)
        if own is None or own.state == "unreadable" or answer is None:
            continue
        same = own.state == "present" and _same(name, own.value, answer)
        (checks if same else failures).append(VS_OCR[name])
        if same and ocr_classes and name in ocr_classes and own.confidence is not None:
            embedded[name] = (ocr_classes[name], own.confidence)
    doc_type = fields.get("doc_type")
    classes = _classes(judged.states, doc_type, checks, failures, judged.lp)
    embedded = {k: v for k, v in embedded.items() if not classes.get(k, "").endswith("/" + DISAGREES)}
    return Judged(checks, failures, judged.states, classes, judged.refuted, judged.lp, judged.issuer, embedded)


def _same(name: str, ours: Any, theirs: Any) -> bool:
    if name == "name":  # spacing is layout, not spelling: 王 小明 and 王小明 are one name
        return same_name(str(ours), str(theirs), spacing=False)
    return str(ours) == str(theirs)


def _reading(value: Any, scores: dict[str, float] | None, name: str) -> FieldReading:
    if value is None:
        return FieldReading.absent()
    return FieldReading(str(value), "present", round(scores.get(name, 1.0), 6) if scores is not None else 1.0)


def _zone(lines: Sequence[str], printed: list[str], today: date) -> tuple[ZoneFormat, ZoneFields] | None:
    """The answer's zone decoded by the zone format it checks best under (as the OCR path picks its zone).
    `printed` (the answer's number) only confirms, it is never assembled into a zone line: a card's 36-character
    line and a 9-character number fill a passport's 44, and one of the 45 ways to drop a character of that can
    pass the passport's two extra check digits by chance and out-score the card's own format."""
    zones = [(fmt, zone) for fmt in FORMATS if isinstance(fmt, ZoneFormat)
             and (zone := fmt.find_zone(list(lines), today, printed)) is not None]
    return max(zones, key=lambda hit: hit[0].zone_score(hit[1])) if zones else None


def _zone_number(zone: ZoneFields, number: Any, checks: list[str], failures: list[str], refuted: list[str]) -> None:
    if not zone.number or not isinstance(number, str):
        return
    passes, same = "mrz.number" in zone.checks_passed, zone.number == number
    if passes and same:  # a repaired zone number equal to the answer's: the answer's number passes the digit
        checks.append("mrz.number")
    elif passes and not zone.number_repaired:  # the digit vouches for the zone's number as written: another one
        failures.append(NUMBER_VS_ZONE)
    elif passes:  # the digit chose a look-alike reading of the zone that is not the answer's: it proves nothing
        failures.append(NUMBER_UNCONFIRMED_CHECK)
    elif same and "mrz.number" in zone.checks_failed:
        failures.append("mrz.number")
        refuted.append("mrz.number: the machine-readable zone's check digit does not match the document number")


def _zone_expiry(fmt: ZoneFormat, zone: ZoneFields, expiry: Any, checks: list[str], failures: list[str],
                 refuted: list[str]) -> None:
    if zone.expiry_date is None or not isinstance(expiry, str) or fmt.expiry_cross_checked:
        return  # an expiry without a check digit of its own proves nothing by agreeing
    check, same = fmt.expiry_check, zone.expiry_date.isoformat() == expiry
    if check in zone.checks_passed:
        (checks if same else failures).append(check if same else EXPIRY_VS_ZONE)
    elif same and check in zone.checks_failed:
        failures.append(check)
        refuted.append(f"{check}: the machine-readable zone's check digit does not match the expiry date")


def _zone_name(zone: ZoneFields, lines: Sequence[str], name: Any, checks: list[str], failures: list[str]) -> None:
    if zone.name_debris:
        failures.append(NAME_FILLERS_CHECK)
    if not zone.name or not isinstance(name, str) or not fold(name):
        return
    ours, theirs = fold(zone.name), fold(name)
    if not theirs.isascii():  # a name in Chinese characters beside the zone's Latin one: nothing to compare
        return
    if ours == theirs:
        checks.append(NAME_VS_ZONE)
    elif theirs.startswith(ours) and not _name_closed(zone.name, lines):
        checks.append(NAME_EXTENDED_CHECK)  # the zone's name field is full: the print may go on
    else:
        failures.append(NAME_VS_ZONE)


def _name_closed(name: str, lines: Sequence[str]) -> bool:
    """Whether the zone line holding the name ends in a filler: then the name is complete."""
    surname = name.split()[0]
    holding = [x for x in lines if surname in x]
    return not holding or holding[0].endswith("<")


def _printed(fields: dict[str, Any], evidence: AnswerEvidence, zone: ZoneFields | None, checks: list[str],
             failures: list[str]) -> None:
    name, copy = fields.get("name"), evidence.printed.get("name")
    if isinstance(name, str) and copy is not None:
        (checks if same_name(name, copy) else failures).append(NAME_VS_PRINTED)
    number, copy = fields.get("id_number"), evidence.printed.get("id_number")
    if isinstance(number, str) and copy is not None:
        if number == copy:
            checks.append(NUMBER_VS_PRINTED)
        elif zone is None or not zone.prints_other_numbers:  # a visa prints the passport's number too
            failures.append(NUMBER_VS_PRINTED)


def _number_check(fields: dict[str, Any]) -> str | None:
    """The name of the number's own checksum when it passes (the PRC MOD 11-2, ...): evidence for its class."""
    number = fields.get("id_number")
    if not isinstance(number, str):
        return None
    check = FORMATS.number_check(fields.get("doc_type"), number)
    return check.name if check is not None and check.passes(number) else None


# ------------------------------------------------------------------------------------ log-probabilities


def value_scores(text: str, tokens: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Per top-level field with a string value, the lowest probability of the tokens that overlap its value's
    characters in the answer text. `tokens`: (token text, log-probability) in order; their concatenation is
    the answer as generated (when it is not `text`, the concatenation is searched)."""
    joined = "".join(t for t, _ in tokens)
    spans = _value_spans(joined if joined != text else text)
    starts, pos = [], 0
    for token, _ in tokens:
        starts.append(pos)
        pos += len(token)
    out: dict[str, float] = {}
    for key, (begin, end) in spans.items():
        probs = [math.exp(lp) for (token, lp), start in zip(tokens, starts)
                 if start < end and start + len(token) > begin and math.isfinite(lp)]
        if probs:
            out[key] = min(probs)
    return out


def _value_spans(text: str) -> dict[str, tuple[int, int]]:
    """(start, end) of each top-level key's string value in the first JSON object of `text` (quotes excluded)."""
    spans: dict[str, tuple[int, int]] = {}
    depth, i, key, expect_key = 0, 0, None, False
    while i < len(text):
        c = text[i]
        if c == '"':
            end = _string_end(text, i)
            if depth == 1 and expect_key:
                key = text[i + 1:end]
            elif depth == 1 and key is not None:
                spans.setdefault(key, (i + 1, end))
                key = None
            i = end + 1
            continue
        if c in "{[":
            depth += 1
            if depth == 1 and c == "{":
                expect_key = True
            elif depth == 2:
                key = None
        elif c in "}]":
            depth -= 1
            if depth == 0:
                break
        elif depth == 1 and c == ",":
            expect_key, key = True, None
        elif depth == 1 and c == ":":
            expect_key = False
        i += 1
    return spans


def _string_end(text: str, start: int) -> int:
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i
        i += 1
    return len(text)
