"""What every document format reads from (`Page`), writes into (`Builder`) and what reading yields
(`DocumentReading`).

Anything not supported by text on the page stays None: a field the document type/side does not carry is
`absent`, a field it should carry but that could not be read reliably is `unreadable`.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from statistics import mean
from typing import Sequence

from pipeline.datamodel import FIELD_NAMES, FieldReading
from pipeline.formats.lines import OcrLine, text_rows
from pipeline.formats.names import looks_like_name
from pipeline.formats.printed_zone import Printed, read_printed

# One of the registered formats' doc types (`pipeline.formats.registered.FORMATS.doc_types()`).
DocumentType = str

# Confidence multipliers: a failed check digit halves trust; a name has no check digit of its own.
CHECK_FAILED = 0.5
UNCHECKED_NAME = 0.85
CROSS_DISAGREES = 0.5
HEURISTIC = 0.5  # value found by position/shape rather than a label (visual zone without MRZ)

# What any document number looks like (the schema's characters and length) with at least one digit: a word
# read where the number should be (the page's "PASSPORT" in its own language) has none. A format may ask more
# (`DocumentFormat.number_shape`: the issuer's pattern).
DOCUMENT_NUMBER = re.compile(r"(?=[0-9A-Z]*\d)[0-9A-Z]{5,20}")


@dataclass(slots=True)
class DocumentReading:
    """What one page says. `fields` holds the schema keys (`name`, `id_number`, `expiry_date` as ISO date,
    "long-term" or None); `format` names the registered format that read it; `score` ranks alternative
    readings of the same page (e.g. 0 deg vs 180 deg)."""

    doc_type: DocumentType
    format: str
    fields: dict[str, str | None]
    states: dict[str, FieldReading]
    checks: list[str] = field(default_factory=list)
    check_failures: list[str] = field(default_factory=list)
    score: float = 0.0
    issuer: str | None = None  # the issuing state or country the page states (`Builder.issuer`)

    @property
    def present(self) -> int:
        """How many fields were read (state `present`): a second reading never replaces one that read more."""
        return sum(s.state == "present" for s in self.states.values())


@dataclass(slots=True)
class Page:
    """One page's OCR boxes as the formats see them: `lines` in reading order (row by row), `rows` the text
    of each row, `texts` the text of each box of `lines`, `printed` the labelled visual-zone values (a format
    may add the values its layout prints without labels before reading)."""

    lines: list[OcrLine]
    rows: list[str]
    texts: list[str]
    printed: Printed
    today: date

    @classmethod
    def of(cls, lines: Sequence[OcrLine], today: date) -> Page:
        rows = text_rows(lines)
        ordered = [x for row in rows for x in row]
        return cls(ordered, [" ".join(x.text for x in row) for row in rows], [x.text for x in ordered],
                   read_printed(ordered), today)


@dataclass(slots=True)
class Builder:
    """The fields, states and checks of a reading as a format fills them in. A name that does not look like a
    name (`looks_like_name`) or a number without the format's `number_shape` is unreadable, never stored."""

    number_shape: re.Pattern[str] = DOCUMENT_NUMBER
    fields: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(FIELD_NAMES))
    states: dict[str, FieldReading] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    # the issuing state or country as the page states it: the zone's issuer code (ICAO 9303 / ISO 18013 letters,
    # `D` for Germany), or the one state that issues every document of the format (`DocumentFormat.issuer`)
    issuer: str | None = None

    def present(self, key: str, value: str, confidence: float) -> None:
        if key == "name":  # a recogniser's full-width or compatibility forms ("ＧＡＬ") as the letters printed
            value = unicodedata.normalize("NFKC", value)
            if not looks_like_name(value):
                self.failures.append("name.shape")
                return self.unreadable(key)
        if key == "id_number" and not self.number_shape.fullmatch(re.sub(r"\s+", "", value.upper())):
            self.failures.append("number.shape")
            return self.unreadable(key)
        self.fields[key] = value
        self.states[key] = FieldReading(value, "present", round(min(max(confidence, 0.0), 1.0), 3))

    def absent(self, key: str) -> None:
        self.states[key] = FieldReading.absent()

    def unreadable(self, key: str) -> None:
        self.fields[key] = None
        self.states[key] = FieldReading(None, "unreadable", 0.0)

    def finish(self, doc_type: DocumentType, format_name: str) -> DocumentReading:
        for key in FIELD_NAMES:
            self.states.setdefault(key, FieldReading(None, "unreadable", 0.0))
        present = [s.confidence for s in self.states.values() if s.state == "present"]
        score = len(self.checks) - 0.5 * len(self.failures) + (mean(present) if present else 0.0)
        return DocumentReading(doc_type, format_name, self.fields, self.states, self.checks, self.failures,
                               round(score, 3), self.issuer)
