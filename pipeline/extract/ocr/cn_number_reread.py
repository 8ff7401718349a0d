"""A second, targeted reading of a PRC resident ID card's 公民身份号码, for portrait-side pages whose first
reading left the number unreadable or failed its MOD 11-2 check character.

Why a second reading helps: on a small or dark capture the number line is detected (its box is there) but
one or two of its 18 characters are ~6 px tall and a digit is misread or lost. The line can be cut out from
the first pass's geometry (the box of the number-shaped text, or the row right of the 公民身份号码 label),
straightened, upscaled to a fixed text height, contrast-normalised in a few ways and re-recognised with the
recognition model alone (the helpers of `mrz_reread`). When the page's direction was unsure, the cut line is
also read turned 180°: a line read upside down gives digit-like nonsense (0, 1, 6/9 and 8 survive the turn).

Why it cannot invent: a re-read text counts only through a window of 18 characters that passes the checksum
with a real birth date (`cn_id.is_valid_number`) and agrees with the printed 出生 and 性别 where the first pass
read them. If the variants give two different such numbers, the line is ambiguous and stays unreadable; the
number found goes back through the same page decoder as the first pass (`read_document`), which re-runs the
cross-checks.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np

from pipeline.extract.ocr.mrz_reread import Recognise, Row, refine, strip, variants
from pipeline.formats.dates import normalise_text
from pipeline.formats.document import DocumentReading, OcrLine, read_document
from pipeline.formats import cn_id

_NUMBER_LENGTH = 18
# Characters the recogniser gives for a digit of this print (the repairs `cn_id.normalise_number` accepts).
_DIGIT_LIKE = re.compile(r"[0-9OoDIl|BSZXx×]")
_LABEL = "公民身份号码"
_LABEL_PART = re.compile(r"公民|身份|号码")


def needed(reading: DocumentReading) -> bool:
    """A PRC ID page whose portrait side is there but whose number is unreadable or failed its checksum."""
    if reading.format != "cn_id":
        return False
    state = reading.states.get("id_number")
    failed = "cn_id.checksum" in reading.check_failures
    return failed or (state is not None and state.state == "unreadable")


def _digit_like(text: str) -> int:
    return len(_DIGIT_LIKE.findall(normalise_text(text)))


def _is_number_shaped(text: str) -> bool:
    """A box holding (most of) the number: at least 12 digit-like characters, and they are most of it."""
    flat = normalise_text(text)
    digits = _digit_like(flat)
    return digits >= 12 and digits >= 0.75 * len(flat)


def _box_height(line: OcrLine) -> float:
    p = line.box
    return (math.dist(p[0], p[3]) + math.dist(p[1], p[2])) / 2


def _angle(line: OcrLine) -> float:
    (x0, y0), (x1, y1) = line.box[0], line.box[1]
    return math.atan2(y1 - y0, x1 - x0)


def _centre(line: OcrLine) -> tuple[float, float]:
    return float(np.mean([p[0] for p in line.box])), float(np.mean([p[1] for p in line.box]))


def _row_of_number(box: OcrLine) -> Row:
    """The number's row from its box, widened to 18 characters when the box holds fewer (a digit the
    detector left outside), plus one character height each side."""
    cx, cy = _centre(box)
    height = _box_height(box)
    width = math.dist(box.box[0], box.box[1])
    chars = max(len(normalise_text(box.text)), 1)
    full = max(width, _NUMBER_LENGTH * width / chars)
    return Row(cx, cy, _angle(box), height, full / 2 + height)


def _row_right_of_label(label: OcrLine, page_width: int) -> Row:
    """The row right of a 公民身份号码 label: the number starts after the label and runs ~18 digit widths
    (a digit is about half a label character wide); clipped to the page."""
    height = _box_height(label)
    angle = _angle(label)
    start = label.right
    end = min(start + 0.6 * _NUMBER_LENGTH * height + 2 * height, float(page_width))
    _, cy = _centre(label)
    half = max((end - start) / 2, height)
    return Row(start + half, cy + math.tan(angle) * half, angle, height, half)


def locate(lines: Sequence[OcrLine], page_width: int) -> list[Row]:
    """Where the number line may be: every number-shaped box (at most two, the longest), else the row
    right of the 公民身份号码 label (or a box with a part of it)."""
    shaped = sorted((x for x in lines if _is_number_shaped(x.text)), key=lambda x: -_digit_like(x.text))[:2]
    if shaped:
        return [_row_of_number(x) for x in shaped]
    labels = [x for x in lines if _LABEL in normalise_text(x.text)] or \
        [x for x in lines if _LABEL_PART.search(normalise_text(x.text)) and _digit_like(x.text) < 6]
    return [_row_right_of_label(x, page_width) for x in labels[:1]]


@dataclass(frozen=True, slots=True)
class Read:
    """One recognition of a cut number line: text, score, and the row it came from."""

    text: str
    score: float
    row: Row


def read_rows(pixels: np.ndarray, rows: Sequence[Row], recognise: Recognise, *, both_ways: bool) -> list[Read]:
    """Every contrast variant of every row, recognised; each also turned 180° when `both_ways`."""
    out = []
    for row in rows:
        row = refine(pixels, row, max_growth=1.6)
        for img in variants(strip(pixels, row)).values():
            turns = (img, np.ascontiguousarray(img[::-1, ::-1])) if both_ways else (img,)
            for turned in turns:
                read = recognise(turned)
                if read.text:
                    out.append(Read(read.text, read.score, row))
    return out


def valid_numbers(text: str, today: date) -> set[str]:
    """Every 18-character window of `text` that is a valid number after the digit repairs `cn_id` accepts."""
    flat = normalise_text(text)
    found = set()
    for start in range(len(flat) - _NUMBER_LENGTH + 1):
        number = cn_id.normalise_number(flat[start:start + _NUMBER_LENGTH], today=today)
        if number is not None:
            found.add(number)
    return found


def agrees(number: str, printed_birth: date | None, printed_sex: str | None) -> bool:
    """The number's embedded birth date and sex match the printed 出生 and 性别 where they were read."""
    return (printed_birth is None or cn_id.birth_date(number) == printed_birth) and \
        (printed_sex is None or cn_id.sex(number) == printed_sex)


def choose(texts: Iterable[str], today: date, printed_birth: date | None = None,
           printed_sex: str | None = None) -> str | None:
    """The one number the re-read texts support, or None.

    Every checksum-valid number any text holds is a candidate; when two distinct ones turn up, the line is
    ambiguous (the check character cannot tell which digit was misread) and nothing is chosen, even when
    only one of them agrees with the printed dates: agreement covers 8 of the 18 characters. A single
    candidate must also agree with the printed 出生 and 性别 where they were read."""
    candidates = set().union(*(valid_numbers(t, today) for t in texts))
    if len(candidates) != 1:
        return None
    (number,) = candidates
    return number if agrees(number, printed_birth, printed_sex) else None


def _with_number(lines: Sequence[OcrLine], number: OcrLine, rows: Sequence[Row]) -> list[OcrLine]:
    """The page's lines with its number-shaped boxes and any box on the number's row swapped for the re-read
    number (a fragment left beside it would join its row)."""
    def on_row(x: OcrLine) -> bool:
        return any(abs(x.middle - r.cy) < 0.5 * r.height and x.right > r.cx - r.half_width and
                   x.left < r.cx + r.half_width and _LABEL not in normalise_text(x.text) for r in rows)

    return [x for x in lines if not _is_number_shaped(x.text) and not on_row(x)] + [number]


def second_reading(pixels: np.ndarray, lines: Sequence[OcrLine], first: DocumentReading, today: date,
                   recognise: Recognise, *, both_ways: bool) -> DocumentReading:
    """The first reading with the number re-read, when exactly one valid number agreeing with the printed
    dates comes out of the cut line and the page decoder then reads the page with it and no fewer fields;
    otherwise the first reading unchanged."""
    rows = locate(lines, pixels.shape[1])
    if not rows:
        return first
    reads = read_rows(pixels, rows, recognise, both_ways=both_ways)
    front = cn_id.parse_front([x.text for x in lines], today=today)
    number = choose([r.text for r in reads], today, front.birth_date, front.sex)
    if number is None:
        return first
    support = [r for r in reads if number in valid_numbers(r.text, today)]
    line = OcrLine(number, float(np.mean([r.score for r in support])), support[0].row.box)
    candidate = read_document(_with_number(lines, line, rows), today)
    if candidate.fields.get("id_number") != number or candidate.present <= first.present:
        return first
    return candidate

