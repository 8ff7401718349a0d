"""The printed (visual) zone: values found under their labels, or by shape where no label was read.

Label association is approximate (OCR mangles small label print), so these values are evidence to
cross-check a machine-readable zone with, or, on a page without one, a low-confidence reading.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import re
from dataclasses import dataclass, field
from datetime import date
from typing import Sequence

from pipeline.formats.dates import parse_printed_dates
from pipeline.formats.lines import OcrLine, fold
from pipeline.formats.values import clean_name, clean_number

_LABELS: dict[str, tuple[str, ...]] = {
    "surname": ("surname", "primary identifier", "apellidos", "nom", "mbiemri", "soyadi", "nazwisko", "cognome",
                "naam", "prezime", "prijmeni"),
    "given": ("given names", "given name", "secondary identifier", "prenoms", "nombres", "emri", "vorname",
              "given name patronymic", "given names patronymic", "vornamen", "voornamen", "nome", "nombre",
              "ime", "jmeno"),
    "name": ("name", "name surname given names"),
    "number": ("passport no", "document no", "passport number", "card no", "no of document", "numero",
               "n du document", "documentnummer", "document number", "num soport", "num soporte",
               "broj osobne iskaznice", "cislo dokladu"),
    "expiry": ("date of expiry", "expiry", "valid until", "expiration date", "date d expiration",
               "fecha de caducidad", "gultig bis", "date of expiration", "expiry date", "date d expir",
               "geldig tot", "valido hasta", "scadenza", "datum isteka", "platnost do", "expires on"),
    "personal": ("personal no", "personal number", "nr personal", "personal id no", "persoonsnummer"),
}


@functools.lru_cache(maxsize=4096)  # pure, and asked of every box once per label on the page
def label_kind(text: str) -> str | None:
    """Which field a label box names, matching each '/'-separated language variant fuzzily (OCR mangles
    small label print). Each "m" read is also tried as "rn": small print's "rn" is read as "m" so often
    ('Sumame', 'Sumtame' for 'Surname') that a plain ratio would lose the label. Only that way round: comparing
    "rn" as "m" on both sides shortens the labels, and short debris ('Suae') would then pass for one.
    A label one of whose variants names the surname is a surname label ("Name/Surname" on German cards, whose
    full name is surname and "Vornamen/Given names" together)."""
    ratios = _label_ratios(text)
    best = max(ratios, key=ratios.__getitem__)
    if best == "name" and ratios["surname"] >= 0.8:
        return "surname"
    return best if ratios[best] >= 0.8 else _two_variants(text)


def _two_variants(text: str) -> str | None:
    """A bilingual label whose '/' OCR lost ("Suname Nom", "Given namesPrenoms"): the field, when the box splits
    (at a space, or where a lower-case letter meets an upper-case one) into two parts that each name it. Both
    must: one label word beside other text ("Nom d'usage") is no label."""
    if "/" in text or "|" in text or any(c.isdigit() for c in text):
        return None
    for i in range(1, len(text)):
        if text[i].isspace() or (text[i - 1].islower() and text[i].isupper()):
            left, right = _label_ratios(text[:i]), _label_ratios(text[i:])
            both = [k for k in _LABELS if left[k] >= 0.8 and right[k] >= 0.8]
            if both:
                return max(both, key=lambda k: left[k] + right[k])
    return None


@functools.lru_cache(maxsize=4096)
def _label_ratios(text: str) -> dict[str, float]:
    """For each field, how closely `text` (any of its '/'-separated variants) matches one of its labels."""
    ratios = dict.fromkeys(_LABELS, 0.0)
    for part in re.split(r"[/|]", text):
        folded = fold(part).lower()
        if not folded:
            continue
        for kind, words in _LABELS.items():
            for word, read in itertools.product(words, _rn_readings(folded)):
                ratios[kind] = max(ratios[kind], difflib.SequenceMatcher(None, read, word).ratio())
    return ratios


def _rn_readings(text: str) -> set[str]:
    """`text`, and `text` with each one of its first three "m"s, or all of them, read as "rn"."""
    spots = [i for i, c in enumerate(text) if c == "m"][:3]
    return {text, text.replace("m", "rn")} | {text[:i] + "rn" + text[i + 1:] for i in spots}


def value_below(label: OcrLine, lines: Sequence[OcrLine]) -> OcrLine | None:
    """The nearest box under a label that starts in the label's column (printed zones put values there); never
    zone text (a printed value has no `<`): on a page whose last label sits just above the MRZ, the zone's first
    line is not that label's value. When the nearest box there is the label of another field, the label has no
    value under it (the box under that one is the other field's value); a second line of the same label (its
    other language) is passed over."""
    kind = label_kind(label.text)
    below = [x for x in lines if x is not label and x.top > label.middle and x.top - label.bottom < 2.5 * label.height
             and abs(x.left - label.left) < 3 * label.height and "<" not in x.text
             and label_kind(x.text) != kind]
    if not below:
        return None
    nearest = min(below, key=lambda x: x.top)
    return nearest if label_kind(nearest.text) is None else None


def _value_right(label: OcrLine, lines: Sequence[OcrLine]) -> OcrLine | None:
    """The nearest box on the label's own line to its right, within six label heights (layouts that print a
    value beside its label); never zone text nor another label."""
    right = [x for x in lines if x is not label and abs(x.middle - label.middle) < 0.5 * label.height
             and x.left >= label.right - 0.5 * label.height and x.left - label.right < 6 * label.height
             and "<" not in x.text and label_kind(x.text) is None]
    return min(right, key=lambda x: x.left) if right else None


def value_of(label: OcrLine, lines: Sequence[OcrLine]) -> OcrLine | None:
    """A label's value box by layout: under the label (most card layouts), else beside it on its right."""
    return value_below(label, lines) or _value_right(label, lines)


@dataclass(slots=True)
class Printed:
    """Visual-zone values with the OCR score of the box they came from, by kind (`surname`, `given`, `name`,
    `number`, `expiry`). A format may add values its own layout prints without labels (`setdefault`)."""

    values: dict[str, tuple[str, float]] = field(default_factory=dict)
    personal: set[str] = field(default_factory=set)  # values of personal-number labels (not doc numbers)


# What a value must look like to be taken from its label's box: a number of 6+ letters and digits with at least
# 3 digits, a date with day, month and year; a field number ("4b") or a stray digit is neither.
NUMBER_VALUE = re.compile(r"(?=(?:[A-Z]*\d){3})[0-9A-Z]{6,}")
_INLINE_SHAPE = {
    "number": NUMBER_VALUE,
    "expiry": re.compile(r"\d{1,2}\s*[./ -]\s*(?:\d{1,2}|[A-Za-z]{3,})\s*[./ -]\s*\d{2,4}"),
}


def inline_value(kind: str, label: OcrLine) -> OcrLine | None:
    """The value a label box carries after its own label words, for a number or an expiry date (layouts that
    print the value beside its label, which OCR then reads as one box: `NUM SOPORT BAA000589`): the words
    after the longest run of leading words that is this label, when they have the shape of its value
    (`_INLINE_SHAPE`). None otherwise; a name is never taken this way (a name's words cannot be told from a
    label's)."""
    if kind not in ("number", "expiry"):
        return None
    starts = [m.start() for m in re.finditer(r"\S+", label.text)]
    for start in reversed(starts[1:]):  # the longest label first: "Document No" before "Document"
        if _INLINE_SHAPE[kind].search(label.text[start:]) and label_kind(label.text[:start]) == kind:
            return _rest_of(label, start)
    glued = _glued_start(kind, label.text)
    return _rest_of(label, glued) if glued is not None else None


def _glued_start(kind: str, text: str) -> int | None:
    """Where the value starts in a box whose label and value OCR read with no space between them
    (`NUM SOPORTGZL364434`): of the places where a letter is followed by a letter or digit and what follows has
    the value's shape in full, the one whose text before it is most like one of the field's labels (a fuzzy
    match would also take `NUM SOPORTG` for the label, only less closely). None when no such prefix is a label."""
    shape = _INLINE_SHAPE[kind]
    splits = [i for i in range(1, len(text)) if text[i - 1].isalpha() and text[i].isalnum()
              and shape.fullmatch(text[i:].strip())]
    ratios = {i: _label_ratios(text[:i])[kind] for i in splits}
    best = max(ratios, key=ratios.__getitem__, default=None)
    return best if best is not None and ratios[best] >= 0.8 else None


def _rest_of(label: OcrLine, start: int) -> OcrLine:
    """The part of a box from `start` on, scored by its own characters where OCR gave per-character scores."""
    scores = label.char_scores[start:] if len(label.char_scores) == len(label.text) else ()
    return OcrLine(label.text[start:], sum(scores) / len(scores) if scores else label.score, label.box, scores)


def read_printed(lines: Sequence[OcrLine]) -> Printed:
    printed = Printed()
    for line in lines:
        kind = label_kind(line.text)
        if kind is None or kind in printed.values:
            continue
        value = inline_value(kind, line) or value_of(line, lines)
        if value is None:
            continue
        if kind == "personal":
            printed.personal.add(re.sub(r"\s+", "", value.text.upper()))
        elif cleaned := _clean(kind, value.text):
            printed.values[kind] = (cleaned, value.score)
    return printed


def _clean(kind: str, text: str) -> str:
    """The value without the marks, field numbers and label words printed around it (`values`)."""
    if kind in ("surname", "given", "name"):
        return clean_name(text)
    if kind == "number":
        return clean_number(text)
    return text.strip()


def printed_name(printed: Printed) -> tuple[str, float] | None:
    """The printed full name: surname and given names together where the page labels them apart, else the
    value of a name label. Half of it is no name: a page that labels surname and given names apart but where
    only one of them was read (or beside a full-name label) gives None, so a given name alone (or a surname
    alone, or a "SPECIMEN" printed as both) is never taken for the full name."""
    values = printed.values
    if "surname" in values and "given" in values:
        (s, s_score), (g, g_score) = values["surname"], values["given"]
        return f"{s} {g}", min(s_score, g_score)
    if "surname" in values or "given" in values:
        return None
    return values.get("name")


# Letters and 6-10 digits, at least 7 characters: six digits alone are as often a date (YYMMDD, DDMMYY), a
# card access number or a code printed beside the photo as a document number, and without a label nothing
# says which.
_NUMBER_SHAPE = re.compile(r"(?=.{7})[A-Z]{0,2}\d{6,10}[A-Z]?")


def unlabelled_number(lines: Sequence[OcrLine], printed: Printed) -> tuple[str, float] | None:
    """The single box shaped like a document number (`_NUMBER_SHAPE`), excluding personal numbers; None when
    there is not exactly one."""
    hits = {(t, x.score) for x in lines if _NUMBER_SHAPE.fullmatch(t := re.sub(r"\s+", "", x.text.upper()))
            and t not in printed.personal}
    return hits.pop() if len(hits) == 1 else None


def latest_date(lines: Sequence[OcrLine], today: date) -> tuple[str, float] | None:
    """With birth, issue and expiry dates printed (>= 3 distinct four-digit-year dates), the latest one is
    the expiry: used only when no expiry label was read."""
    dated = {d: x.score for x in lines if re.search(r"\d{4}", x.text) for d in parse_printed_dates(x.text, today=today)}
    if len(dated) < 3:
        return None
    latest = max(dated)
    return latest.isoformat(), dated[latest]
