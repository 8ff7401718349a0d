"""Fixed-layout machine-readable zones outside ICAO 9303 (French ID card 1988-2021, driving licences):
one engine for their check digits and for finding them in OCR output, driven by a per-format `Layout`.

They share ICAO's alphabet, 7-3-1 check digit and OCR failure modes (fillers read as K/«/space, O/0
swaps), so the repairs are those of `pipeline.formats.mrz` and follow the same rule: a character is changed
only where the position class makes one reading impossible, and a reading whose length had to be repaired
must pass every check digit.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Sequence

from pipeline.formats import mrz

Span = tuple[int, int, int]  # (line, start, end)


@dataclass(frozen=True, slots=True)
class Check:
    """One check digit: `name` (e.g. "mrz.number"), the spans whose concatenation it protects, and where
    the digit is printed (line, index)."""

    name: str
    data: tuple[Span, ...]
    digit: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Layout:
    """A zone's shape. `classes` has one string per line with one `mrz.repair_chars` class letter per
    position (d date/number digit, n check digit, a letter, s sex, N name, x/o anything); `name_spans` are
    the name fields whose filler runs may be read as K; `loses_tail` marks lines that end in fillers OCR
    may drop (padded at the end rather than realigned)."""

    prefix: str
    width: int
    classes: tuple[str, ...]
    checks: tuple[Check, ...]
    name_spans: tuple[Span, ...]
    loses_tail: tuple[bool, ...]
    min_checks: int  # passing check digits needed before text counts as this zone (chance: 0.1 each)

    def __post_init__(self) -> None:
        assert all(len(c) == self.width for c in self.classes) and len(self.loses_tail) == len(self.classes)


def _text(lines: Sequence[str], spans: Sequence[Span]) -> str:
    return "".join(lines[line][start:end] for line, start, end in spans)


def run_checks(layout: Layout, lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """(passed, failed) check names for exact lines."""
    passed: list[str] = []
    failed: list[str] = []
    for check in layout.checks:
        line, index = check.digit
        ok = mrz.check_ok(_text(lines, check.data), lines[line][index])
        (passed if ok else failed).append(check.name)
    return passed, failed


def exact(layout: Layout, lines: Sequence[str]) -> tuple[str, ...] | None:
    """The lines as printed when they have this layout's shape (count, width, alphabet, prefix), else None."""
    stripped = tuple(x.strip() for x in lines)
    if len(stripped) != len(layout.classes) or any(len(x) != layout.width for x in stripped):
        return None
    if not all(mrz.is_mrz_text(x) for x in stripped):
        return None
    return stripped if stripped[0].startswith(layout.prefix) else None


def _repaired(layout: Layout, line_no: int, text: str) -> str:
    fixed = mrz.repair_chars(text, layout.classes[line_no])
    for line, start, end in layout.name_spans:
        if line == line_no:
            fixed = fixed[:start] + mrz.repair_name_field(fixed[start:end]) + fixed[end:]
    return fixed


def _plausible_length(layout: Layout, line_no: int, text: str) -> bool:
    low = layout.width // 2 if layout.loses_tail[line_no] else layout.width - 3
    return low <= len(text) <= layout.width + 3


def find(layout: Layout, lines: Sequence[str]) -> tuple[tuple[str, ...], list[str], list[str]] | None:
    """Locate the zone among OCR text lines and repair it: (exact lines, checks passed, checks failed) of
    the best reading with at least `min_checks` passing digits, or None."""
    n = len(layout.classes)
    best: tuple[tuple[str, ...], list[str], list[str]] | None = None
    best_score = float("-inf")
    for spaces_as_filler in (False, True):
        assembled = mrz.assemble_lines(mrz.ocr_segments(lines, spaces_as_filler=spaces_as_filler), layout.width)
        for window in (assembled[i:i + n] for i in range(len(assembled) - n + 1)):
            if not all(_plausible_length(layout, i, x) for i, x in enumerate(window)):
                continue
            per_line = [[_repaired(layout, i, v) for v in mrz.fit_width(x, layout.width, layout.loses_tail[i])]
                        for i, x in enumerate(window)]
            if not per_line[0][0].startswith(layout.prefix):
                continue
            for combo in itertools.product(*(list(enumerate(v)) for v in per_line)):
                texts = tuple(t for _, t in combo)
                if exact(layout, texts) is None:
                    continue
                passed, failed = run_checks(layout, texts)
                length_repaired = any(i > 0 for i, _ in combo)
                mismatches = sum(mrz.shape_mismatches(t, c) for t, c in zip(texts, layout.classes))
                if len(passed) < layout.min_checks or (length_repaired and (failed or mismatches)):
                    continue
                score = len(passed) - 0.5 * len(failed) - mismatches
                if score > best_score:
                    best, best_score = (texts, passed, failed), score
    return best


def names(field_text: str) -> str:
    """A name field with its fillers as single spaces ("TEST<NAME<<<" -> "TEST NAME")."""
    return " ".join(field_text.replace("<", " ").split())
