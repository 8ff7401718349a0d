"""Rules on field confidence that no calibration table can override, for every backend.

A field read by recognition alone from a box smeared by camera shake (a PRC name whose box failed
`capture.field_sharp`: evidence class `..._shaken`) is never auto-accepted either: under shake the recogniser reads
a look-alike character at a sure score, so its score is no evidence, however many shaken names a table has seen
read right at that score. Its confidence is held at the table's unseen cap (`ceiling`), below the threshold.

A field whose sources disagree (the zone and the printed zone name two different numbers; the printed birth date
is not the one a PRC number embeds; a complete zone name and a printed name with more letters) is never
auto-accepted, whatever a fitted table says of its evidence class: a table measures how often such readings were
right on the tuning sets, but a disagreement on the document itself means one of the two readings is wrong, and
only a person can say which. So after calibration its confidence is capped at `DISAGREEMENT_CAP`, below the
documented auto-accept threshold (0.95) and the hybrid's.

Which failed checks are disagreements, and of which field, each document format declares
(`DocumentFormat.disagreements`, asked through `FORMATS.disagreeing_fields`); a backend with checks of its own
(a VLM answer against the zone it transcribed) passes them as `extra`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pipeline.datamodel import Extraction, FieldReading
from pipeline.formats.document_format import SHAKEN_CLASS
from pipeline.formats.registered import FORMATS

DISAGREEMENT_CAP = 0.5

# A model answer's own disagreements: the answer's fields against the zone and printed copies it transcribed
# (`pipeline.extract.model.answer_evidence`) and against the embedded OCR's reading of the same page.
DISAGREES = "disagrees"  # the evidence source of a field whose sources contradict each other
NAME_VS_ZONE = "cross.name_mrz_vs_viz"
NAME_VS_PRINTED = "cross.name_answer_vs_printed"
NUMBER_VS_ZONE = "cross.number_answer_vs_mrz"
NUMBER_VS_PRINTED = "cross.number_answer_vs_printed"
EXPIRY_VS_ZONE = "cross.expiry_answer_vs_mrz"
# The answer's field against the embedded OCR's reading of the same page (`with_ocr_reading`).
VS_OCR: dict[str, str] = {"name": "cross.name_answer_vs_ocr", "id_number": "cross.number_answer_vs_ocr",
                          "expiry_date": "cross.expiry_answer_vs_ocr"}
# The failed checks that make a field's sources disagree.
DISAGREEMENTS: dict[str, tuple[str, ...]] = {
    "name": (NAME_VS_ZONE, NAME_VS_PRINTED, VS_OCR["name"]),
    "id_number": (NUMBER_VS_ZONE, NUMBER_VS_PRINTED, VS_OCR["id_number"]),
    "expiry_date": (EXPIRY_VS_ZONE, VS_OCR["expiry_date"]),
}
# The same, as `cap_disagreements` takes it (failed check -> field).
ANSWER_DISAGREEMENTS: dict[str, str] = {check: name for name, checks in DISAGREEMENTS.items() for check in checks}


def ceiling(cls_name: str, value: float, unseen_cap: float) -> float:
    """A table's `value` for evidence class `cls_name` under the rules on classes: a disagreement's class
    (`.../disagrees`) at most `DISAGREEMENT_CAP`, a shaken box's (`..._shaken`) at most `unseen_cap`."""
    if cls_name.endswith("/" + DISAGREES):
        return min(value, DISAGREEMENT_CAP)
    return min(value, unseen_cap) if cls_name.endswith(SHAKEN_CLASS) else value


def disagreeing_fields(failures: list[str], extra: Mapping[str, str] | None = None) -> set[str]:
    """The fields whose sources disagree, from a reading's failed checks: the formats' disagreements and
    `extra` (failed check -> field)."""
    return FORMATS.disagreeing_fields(failures) | {f for check, f in (extra or {}).items() if check in failures}


def cap_disagreements(extraction: Extraction, extra: Mapping[str, str] | None = None) -> Extraction:
    """The extraction with every present or absent field whose sources disagree capped at `DISAGREEMENT_CAP`
    (one source reading no value where another reads one is a disagreement too); call it after calibration: it is
    the last word on a field's confidence."""
    fields = disagreeing_fields(extraction.check_failures, extra)
    states = dict(extraction.field_states)
    capped = False
    for name in fields:
        reading = states.get(name)
        if (reading is not None and reading.state != "unreadable" and reading.confidence is not None
                and reading.confidence > DISAGREEMENT_CAP):
            states[name] = FieldReading(reading.value, reading.state, DISAGREEMENT_CAP)
            capped = True
    return dataclasses.replace(extraction, field_states=states) if capped else extraction
