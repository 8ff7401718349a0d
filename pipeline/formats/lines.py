"""OCR text boxes of one page and their layout: rows, the machine-readable zone's boxes, folding names.

Every document format reads the same boxes, so their geometry lives here, below the formats.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from statistics import mean
from typing import Sequence


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One OCR text box: text, recognition score in [0, 1], 4 corner points in image coordinates, and the
    recogniser's probability of each character of `text` where it gave them (`char_scores`, one per character;
    empty when unknown). `score` is their mean over the whole box, labels included."""

    text: str
    score: float
    box: tuple[tuple[float, float], ...]
    char_scores: tuple[float, ...] = ()

    @property
    def left(self) -> float:
        return min(p[0] for p in self.box)

    @property
    def right(self) -> float:
        return max(p[0] for p in self.box)

    @property
    def top(self) -> float:
        return min(p[1] for p in self.box)

    @property
    def bottom(self) -> float:
        return max(p[1] for p in self.box)

    @property
    def height(self) -> float:
        return max(self.bottom - self.top, 1.0)

    @property
    def middle(self) -> float:
        return (self.top + self.bottom) / 2


def text_rows(lines: Sequence[OcrLine]) -> list[list[OcrLine]]:
    """Group boxes into text rows, top to bottom, each left to right.

    OCR splits one printed line into several boxes (MRZ filler runs, wide gaps): a box joins a row when
    their vertical bands overlap by half a line and it starts within 1.5 line heights of the row's right
    end. Columns of a card and the two sides of a scan stay separate: their gap is wider than that.
    """
    rows: list[list[OcrLine]] = []
    for line in sorted(lines, key=lambda x: x.left):
        for row in rows:
            last = row[-1]
            same_band = abs(line.middle - last.middle) < 0.5 * min(last.height, line.height)
            if same_band and line.left - last.right < 1.5 * max(last.height, line.height):
                row.append(line)
                break
        else:
            rows.append([line])
    return sorted(rows, key=lambda r: min(x.top for x in r))


# ICAO 9303 Part 3's transliteration of the Latin letters that have no decomposition (NFKD keeps Æ, Ø, Þ whole): a
# zone spells them so, and a printed name compared with a zone's must be spelled so too.
_ZONE_SPELLING = str.maketrans({"Æ": "AE", "Ø": "OE", "Þ": "TH", "Ð": "D", "Đ": "D", "Œ": "OE", "Ł": "L", "Ħ": "H",
                                "Ŋ": "N", "Ŧ": "T", "Ŀ": "L", "ẞ": "SS"})
# Letters an issuer may spell either way in its zone (ICAO 9303 Part 3): Ä as AE or A, Å as AA or A, Ö as OE or O,
# Ü as UE or U. `fold` drops the marks; `fold(..., expand=True)` spells them out.
_SPELLED_OUT = str.maketrans({"Ä": "AE", "Å": "AA", "Ö": "OE", "Ü": "UE"})


def fold(text: str, *, expand: bool = False) -> str:
    """Upper case, spelled as a zone spells it (accents removed, Æ as AE, Þ as TH; with `expand`, Ä, Å, Ö and Ü
    as AE, AA, OE and UE), non-letters as single spaces: for comparing names across zones."""
    upper = unicodedata.normalize("NFC", text.upper()).translate(_ZONE_SPELLING)
    if expand:
        upper = upper.translate(_SPELLED_OUT)
    decomposed = unicodedata.normalize("NFKD", upper)
    letters = "".join(c if c.isalpha() else " " for c in decomposed if not unicodedata.combining(c))
    return " ".join(letters.split())


def spellings(text: str) -> set[str]:
    """The ways a zone may spell a printed name (`fold`, with and without Ä, Å, Ö, Ü spelled out)."""
    return {fold(text), fold(text, expand=True)}


def same_name(a: str, b: str, *, spacing: bool = True) -> bool:
    """Whether two names are one as a zone would spell them (`spellings`); without `spacing`, words may be split
    otherwise (王 小明 and 王小明)."""
    def forms(text: str) -> set[str]:
        return spellings(text) if spacing else {x.replace(" ", "") for x in spellings(text)}
    return bool(forms(a) & forms(b))


def line_score(lines: Sequence[OcrLine], needle: str) -> float:
    """OCR score of the box holding `needle` (mean score if none does, e.g. when joined across boxes)."""
    flat = re.sub(r"\s+", "", needle)
    for x in lines:
        if flat and flat in re.sub(r"\s+", "", x.text):
            return x.score
    return mean(x.score for x in lines)


def value_score(lines: Sequence[OcrLine], value: str) -> float:
    """How sure the recogniser was of `value` itself: the lowest probability among its characters in the box
    that holds it verbatim, so one unsure character of a name is not averaged away by a sure label beside it
    ("姓名" at 0.99, one of three name characters at 0.6). The box's score (`line_score`) where no box holds the
    value verbatim or the recogniser gave no per-character probabilities."""
    for x in lines:
        start = x.text.find(value) if value else -1
        if start >= 0 and len(x.char_scores) == len(x.text):
            return min(x.char_scores[start:start + len(value)])
    return line_score(lines, value)


def filler_rich(line: OcrLine) -> bool:
    """A box of zone text: a long one with fillers, or a run of fillers OCR split off a line."""
    fillers = line.text.count("<")
    return fillers >= 2 and (len(line.text) >= 15 or 2 * fillers >= len(line.text))


def zone_boxes_of(lines: Sequence[OcrLine]) -> list[OcrLine]:
    """The boxes of the machine-readable zone: the filler-rich ones and every box within their band (a
    fragment of a zone line whose fillers were split off or misread). Only the other boxes are the printed
    zone, so the zone's own name line can never confirm itself."""
    seeds = [x for x in lines if filler_rich(x)]
    if not seeds:
        return []
    margin = max(x.height for x in seeds)
    top, bottom = min(x.top for x in seeds), max(x.bottom for x in seeds)
    left, right = min(x.left for x in seeds) - margin, max(x.right for x in seeds) + margin
    return [x for x in lines if top <= x.middle <= bottom and left <= x.left and x.right <= right]
