"""A second reader of a machine-readable zone line that works otherwise than the page's recogniser: cut the line
into its fixed number of character cells and classify each cell alone.

Why: an MRZ name has no check digit, so when the printed zone does not confirm it nothing but the recogniser's
own score vouches for it, and that score means different things on a scanner's page and a phone's. The zone is
one monospaced font (OCR-B) at a fixed pitch and fixed line lengths (TD1 30, TD2 36, TD3 44), from an alphabet
of 37 symbols; a per-cell classifier trained on glyphs the project renders itself (`tools/train_mrz_glyphs.py`,
shipped as `models/mrz_glyphs.npz` with its provenance) shares neither the recogniser's sequence model nor its
training data. Two readers that work differently and read the same name are evidence that does not depend on
how the page was captured.

How: the row (located from the first pass's boxes by `mrz_reread`) is cut out straightened; the ink extent of
its text holds exactly `n` cells, and the pitch and phase are the ones whose cell boundaries cross the least ink
(OCR-B keeps its glyphs apart). Each cell is cut with a little of its neighbours, normalised to a fixed size and
contrast, and classified at three small offsets; the surest one counts. Inference is a two-layer perceptron in
numpy (a few matrix products per line).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files

import cv2
import numpy as np

from pipeline.extract.ocr.mrz_reread import Row, locate_rows, refine, strip
from pipeline.formats.document import NAME_EXTENDED_CHECK, DocumentReading, OcrLine, zone_boxes_of
from pipeline.formats.mrz import DOC_CODE_START, NAME_FILLERS_CHECK, TO_ALPHA, clean_ocr_line
from pipeline.formats.national_mrz import names
from pipeline.formats.zone import NAME_RESPELLED_CHECK, NAME_TWO_READERS_CHECK

ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789<"
LETTERS = np.array([c.isalpha() or c == "<" for c in ALPHABET])  # what a name position may hold
CELL_W, CELL_H = 20, 28  # a cell as the classifier sees it
_SHIFTS = (-0.15, 0.0, 0.15)  # of a pitch: the local search around each cell's place
_WIDEN = 0.1  # of a pitch, on each side: a cell is cut with a little of its neighbours
_MIN_PITCH, _MAX_PITCH = 0.45, 1.4  # a zone's pitch over its text height: ICAO 9303 OCR-B ~1.05, a mono font ~0.8
MODEL_FILE = "mrz_glyphs.npz"
# A name the printed zone confirms, read from a zone recognised this poorly (motion blur, a dark phone photo, an
# occluded line), is not right often enough for a person to skip it (the shipped table's confirmed-name class steps
# down below it): the second reader is asked about it too. A test holds this to the table.
UNSURE_CONFIRMED_NAME = 0.983


@dataclass(frozen=True, slots=True)
class GlyphModel:
    """A two-layer perceptron over a cell's normalised pixels: `w1` (features x hidden), `w2` (hidden x 37)."""

    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray

    def probabilities(self, cells: np.ndarray) -> np.ndarray:
        """Each cell's probability of each symbol of `ALPHABET` (cells: k x CELL_H x CELL_W, ink 0..1).

        In numpy's own loops (`einsum`), not BLAS: a product this small in BLAS wakes its thread pool, which the
        OCR's still-spinning threads keep waiting (tens of ms a call under load, against ~2 ms on one core)."""
        x = cells.reshape(len(cells), -1).astype(np.float32) - 0.5
        hidden = np.maximum(np.einsum("ij,jk->ik", x, self.w1, optimize=False) + self.b1, 0.0)
        logits = np.einsum("ij,jk->ik", hidden, self.w2, optimize=False) + self.b2
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)

    def save(self, path) -> None:
        np.savez_compressed(path, w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2,
                            alphabet=np.array(list(ALPHABET)))


@cache
def shipped() -> GlyphModel | None:
    """The shipped model, or None when the file is missing (the second reading then adds nothing)."""
    resource = files("pipeline.extract.ocr").joinpath("models", MODEL_FILE)
    if not resource.is_file():
        return None
    with resource.open("rb") as fh, np.load(fh, allow_pickle=False) as data:
        if "".join(data["alphabet"]) != ALPHABET:
            raise ValueError(f"{MODEL_FILE}: its alphabet is not {ALPHABET!r}")
        return GlyphModel(*(data[k].astype(np.float32) for k in ("w1", "b1", "w2", "b2")))


@dataclass(frozen=True, slots=True)
class LineRead:
    """A line read cell by cell: its text, each cell's probability of the symbol read, and (`cells`, positions x
    `ALPHABET`) each cell's probability of every symbol."""

    text: str
    probabilities: tuple[float, ...]
    cells: np.ndarray | None = field(default=None, compare=False, repr=False)


# A background under this share of the strip's median is not the document's paper (a dark table beside a card in
# an underexposed photo): its ink is measured against the paper's brightness, not its own.
_PAPER = 0.5


def ink_strip(rgb: np.ndarray) -> np.ndarray:
    """A row's strip as ink (float 0..1, print bright): the slowly varying background divided out (glare, a
    tint), the darkest print 1. The max channel, since ink is dark in every channel and foil is not. Where the
    background is darker than `_PAPER` of the strip's median, it is no paper: divided out there, a dark table's
    sensor noise would read as ink as dark as the print's and stretch the line's band and extent over it."""
    gray = cv2.max(cv2.max(rgb[:, :, 0], rgb[:, :, 1]), rgb[:, :, 2]) if rgb.ndim == 3 else rgb
    k = 2 * (gray.shape[0] // 2) + 1
    background = cv2.morphologyEx(gray, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    paper = background.astype(np.float32)
    ink = (paper - gray) / np.maximum(paper, max(_PAPER * float(np.median(paper)), 1.0))
    top = float(np.percentile(ink, 99.5))
    return np.clip(ink / top, 0.0, 1.0) if top > 0.05 else np.zeros_like(ink)


def _rows_on(ink: np.ndarray) -> np.ndarray:
    """Per row of a strip, whether it holds text: at least a fifth of the busiest row's ink."""
    profile = (ink > 0.5).sum(axis=1)
    return profile >= profile.max() / 5


def _text_band(ink: np.ndarray) -> tuple[int, int] | None:
    """The rows the text spans: the run of rows holding text (`_rows_on`) around the middle."""
    if not (ink > 0.5).any():
        return None
    on = _rows_on(ink)
    rows = np.flatnonzero(on)
    middle = len(on) // 2
    seed = int(rows[np.argmin(np.abs(rows - middle))])
    start, stop = _grown(on, seed, seed)
    return (start, stop + 1) if stop - start >= 6 else None


def _grown(on: np.ndarray, start: int, stop: int) -> tuple[int, int]:
    """Rows `start`..`stop` (inclusive) grown over the rows holding text that adjoin them."""
    while start > 0 and on[start - 1]:
        start -= 1
    while stop < len(on) - 1 and on[stop + 1]:
        stop += 1
    return start, stop


def _bridged_band(ink: np.ndarray, band: tuple[int, int]) -> tuple[int, int] | None:
    """`band` (a whole run of rows holding text, as `_text_band` draws it) grown over the runs of rows holding text
    beyond a gap at most half its height, on either side; None when there is none. A name line is mostly fillers,
    whose arms fill the middle and lower rows: smeared by motion, the letters' thinner rows fall below a fifth of the
    busiest row's ink and the band loses the letters' tops or feet. It may as well take in a neighbouring line or a
    pattern: `read_strip` keeps the band whose cells read surer."""
    on = _rows_on(ink)
    start, stop = band[0], band[1] - 1
    reach = (stop - start + 1) // 2
    above = np.flatnonzero(on[max(0, start - reach - 1):start])
    below = np.flatnonzero(on[stop + 1:stop + reach + 2])
    if len(above):
        start = max(0, start - reach - 1) + int(above[0])
    if len(below):
        stop = stop + 1 + int(below[-1])
    start, stop = _grown(on, start, stop)
    return (start, stop + 1) if (start, stop + 1) != band else None


def _text_extent(columns: np.ndarray, height: int) -> tuple[int, int] | None:
    """The zone line's first and last inked column: the widest run of inked columns whose gaps are narrower
    than a text height (the gap beside a narrow glyph, a 1 or an I, is narrower; the edge of a card or a printed
    word beside the zone is farther)."""
    inked = np.flatnonzero(columns > 0)
    if len(inked) == 0:
        return None
    runs, start = [], inked[0]
    for a, b in zip(inked, inked[1:]):
        if b - a > height:
            runs.append((start, a))
            start = b
    runs.append((start, inked[-1]))
    left, right = max(runs, key=lambda r: r[1] - r[0])
    return int(left), int(right) + 1


def cell_grid(ink: np.ndarray, band: tuple[int, int], n: int) -> tuple[float, float] | None:
    """The first cell's left edge and the pitch of a line of `n` cells: the text's extent holds the glyphs of
    `n` cells (between n-1 and n pitches), and of those layouts the one whose cell boundaries cross the least
    ink wins. None when the extent cannot be `n` characters of a zone's proportions."""
    top, bottom = band
    height = bottom - top
    columns = (ink[top:bottom] > 0.5).sum(axis=0).astype(np.float32)
    columns[columns < 2] = 0  # specks
    extent = _text_extent(columns, height)
    if extent is None:
        return None
    left, right = extent
    width = right - left
    if not _MIN_PITCH * height * n <= width <= _MAX_PITCH * height * (n - 1):
        return None
    profile = ink[top:bottom].sum(axis=0)
    pitch = np.linspace(width / n, width / (n - 1), 24)[:, None]  # candidate pitches x candidate starts
    start = right - n * pitch + (left - right + n * pitch) * np.linspace(0.0, 1.0, 16)[None, :]
    edges = start[..., None] + pitch[..., None] * np.arange(n + 1)
    cost = np.interp(edges, np.arange(len(profile)), profile).mean(axis=2)
    i, j = np.unravel_index(int(cost.argmin()), cost.shape)
    return float(start[i, j]), float(pitch[i, 0])


def cut_cell(ink: np.ndarray, band: tuple[int, int], left: float, pitch: float) -> np.ndarray:
    """One cell (from `left`, one pitch wide, a little of each neighbour), resized to CELL_W x CELL_H and
    scaled so its darkest ink is 1."""
    top, bottom = band
    pad_y = max(1, round(0.08 * (bottom - top)))
    x0 = left - _WIDEN * pitch
    x1 = left + (1 + _WIDEN) * pitch
    sx = (x1 - x0) / CELL_W
    sy = (bottom - top + 2 * pad_y) / CELL_H
    m = np.array([[sx, 0, x0], [0, sy, top - pad_y]], dtype=np.float32)
    cell = cv2.warpAffine(ink, m, (CELL_W, CELL_H), flags=cv2.INTER_AREA | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=0.0)
    peak = float(cell.max())
    return cell / peak if peak > 0.2 else cell


def line_cells(ink: np.ndarray, n: int, band: tuple[int, int] | None = None) -> tuple[np.ndarray, int] | None:
    """Every cell of a line of `n` characters at each offset of `_SHIFTS` (n*len(_SHIFTS) x CELL_H x CELL_W,
    cell-major), or None when the strip cannot be cut into `n` cells. `band`: the text's rows (default
    `_text_band`'s)."""
    band = band or _text_band(ink)
    if band is None:
        return None
    grid = cell_grid(ink, band, n)
    if grid is None:
        return None
    start, pitch = grid
    cells = [cut_cell(ink, band, start + i * pitch + s * pitch, pitch) for i in range(n) for s in _SHIFTS]
    return np.stack(cells), len(_SHIFTS)


def classify(model: GlyphModel, cells: np.ndarray, shifts: int, allowed: np.ndarray | None) -> LineRead:
    """Each cell's symbol: at each of its offsets the most probable symbol (among `allowed` per position, a
    boolean position x symbol mask), and of the offsets the surest."""
    p = model.probabilities(cells).reshape(-1, shifts, len(ALPHABET))
    if allowed is not None:
        p = p * allowed[:, None, :]
        p = p / np.maximum(p.sum(axis=2, keepdims=True), 1e-9)
    pick = p.max(axis=2).argmax(axis=1)  # each position's surest offset
    chosen = p[np.arange(len(p)), pick]  # positions x symbols, at that offset
    return LineRead("".join(ALPHABET[i] for i in chosen.argmax(axis=1)), tuple(float(x) for x in chosen.max(axis=1)),
                    chosen)


def read_strip(rgb: np.ndarray, n: int, allowed: np.ndarray | None = None,
               model: GlyphModel | None = None) -> LineRead | None:
    """A straightened row strip (RGB, as `mrz_reread.strip` cuts it) read as `n` cells; None when it cannot be
    cut into `n` cells or no model is shipped. Where the text's band can be drawn two ways (`_bridged_band`),
    both are read and the reading whose cells are surer on average is kept."""
    model = model or shipped()
    if model is None:
        return None
    ink = ink_strip(rgb)
    band = _text_band(ink)
    if band is None:
        return None
    reads = [classify(model, *cut, allowed) for b in (band, _bridged_band(ink, band)) if b is not None
             and (cut := line_cells(ink, n, b)) is not None]
    return max(reads, key=lambda r: float(np.mean(r.probabilities)), default=None)


def read_row(pixels: np.ndarray, row: Row, n: int, allowed: np.ndarray | None = None) -> LineRead | None:
    """One zone row of the page (RGB) read cell by cell: re-centred on its ink (`mrz_reread.refine`), cut out
    straightened, and read as `n` cells."""
    row = refine(pixels, row, max_growth=1.4)
    return read_strip(strip(pixels, row), n, allowed)


def name_mask(n: int, first: int) -> np.ndarray:
    """Positions x symbols: letters and fillers only from position `first` on (the name field), anything
    before."""
    mask = np.ones((n, len(ALPHABET)), dtype=bool)
    mask[first:] = LETTERS
    return mask



# --------------------------------------------------------------------------- the second reading of a zone name

_ZONE_FORMAT = "icao_mrz"  # ICAO 9303 layouts: the name field's place is fixed (TD1 line 3, else line 1 from 5)


def wanted(reading: DocumentReading) -> bool:
    """Whether a reading's name is worth a second reader: a name present on a page whose ICAO zone was decoded, the
    zone's own spelling or, where the zone's name line was lost, the printed name (not respelled as printed, no
    debris among the zone's fillers, not continued by the printed name: those classes stand as they are), that the
    printed zone does not confirm or confirms at a raw score under `UNSURE_CONFIRMED_NAME`."""
    name = reading.states.get("name")
    if reading.format != _ZONE_FORMAT or name is None or name.state != "present":
        return False
    if NAME_EXTENDED_CHECK in reading.checks or \
            {NAME_RESPELLED_CHECK, NAME_FILLERS_CHECK} & set(reading.check_failures):
        return False
    if "cross.name_mrz_vs_viz" in reading.checks:
        return (name.confidence or 0.0) < UNSURE_CONFIRMED_NAME
    return any(c.startswith("mrz.") for c in reading.checks)


def with_name_check(pixels: np.ndarray, lines: Sequence[OcrLine], reading: DocumentReading) -> DocumentReading:
    """The reading with `NAME_TWO_READERS_CHECK` passed (the glyph reader reads the name line's name as the first
    reader did), failed (it reads another), or unchanged (the line could not be found or cut into cells)."""
    agrees = name_agrees(pixels, lines, reading.fields.get("name") or "")
    if agrees is None:
        return reading
    if agrees:
        return dataclasses.replace(reading, checks=[*reading.checks, NAME_TWO_READERS_CHECK])
    return dataclasses.replace(reading, check_failures=[*reading.check_failures, NAME_TWO_READERS_CHECK])


def name_agrees(pixels: np.ndarray, lines: Sequence[OcrLine], name: str) -> bool | None:
    """Whether the glyph reader reads the stored `name` on the zone's name line: the same words, in the same
    order, or all but one cell the same where it finds the stored symbol plausible (`plausible_but_one`).

    The name line is the zone row that holds the surname (`name_line`); where no row does (the first reader lost
    or garbled the line, and the name stored is the printed one), the row where a two-line zone puts it
    (`lost_name_row`), taken only when the glyph reader reads a name line there (`_reads_as_name_line`). None
    when neither is found or the line cannot be cut into cells.

    The words are compared with the stored name, the first reader's line after the zone decoder's repairs, not
    with that line as recognised: a filler the recogniser lost between surname and given name ("GU0<JIANWEN"),
    or one it read as a letter after the name ("SARA<<<<K"), is repaired by the decoder, and a second reader that
    reads the repaired name letter for letter agrees with the value stored."""
    found = name_line(lines, name)
    if found is not None:
        boxes, width, first = found
        row = _located_row(lines, boxes)
    else:
        row, width, first = lost_name_row(lines) or (None, 0, 0)
    read = read_row(pixels, row, width, name_mask(width, first)) if row is not None else None
    if read is None or (found is None and not _reads_as_name_line(read.text, first)):
        return None
    return names(read.text[first:]) == name or plausible_but_one(read, first, name)


def lost_name_row(lines: Sequence[OcrLine]) -> tuple[Row, int, int] | None:
    """Where a two-line zone's name line lies when the first reader did not read it as the name (blur or an
    occluder garbled it, or left it out of the zone's boxes): the located row next above the zone's last row, its
    data line (`mrz_reread.locate_rows` predicts a row the first pass missed one line pitch away), with the
    line's length and where its name field starts. None unless the zone is a two-line one whose last row reads as
    a data line (a TD1 card's name line is its last, after the number and dates)."""
    rows = _zone_rows(lines)
    if not rows:
        return None
    length = _zone_length(rows)
    if length < _TWO_LINE_MIN or sum(c.isdigit() for c in _row_text(rows[-1])) < _DATA_LINE_DIGITS:
        return None
    middle = float(np.mean([x.middle for x in rows[-1]]))
    above = [r for r in locate_rows(lines) if r.cy < middle - 0.6 * r.height]
    if not above:
        return None
    return max(above, key=lambda r: r.cy), _two_line_width(length), _TWO_LINE_NAME_AT


# A zone whose lines are this long or longer is a two-line one (TD2 and MRV-B 36, TD3 and MRV-A 44; TD1 is 30).
_TWO_LINE_MIN = 33
# A two-line zone's data line holds a document number, two dates and check digits: at least this many digits
# (a name line holds none).
_DATA_LINE_DIGITS = 12


def _reads_as_name_line(text: str, first: int) -> bool:
    """Whether a glyph reading of a row is a zone's name line: an ICAO document code, then letters or fillers only
    (the issuing state and the name field), with the `<<` that ends a surname or the field."""
    return text[:1] in _DOCUMENT_CODES and all(c.isalpha() or c == "<" for c in text[2:]) and "<<" in text[first:]


# A zone's first character, any format's (passport P, visa V, an identity card A, C or I)
_DOCUMENT_CODES = "".join(sorted(set("".join(DOC_CODE_START.values()))))


# The glyph reader's probability of the stored symbol, in the one cell where it reads another, from which the two
# readings still agree. On the tuning pages whose two readers disagreed (54), every stored name that was wrong
# (25) had its differing cells at a probability under 0.001 in the glyph reader's eyes, or differed in more than
# one cell; of the right ones (29), 7 differed in one look-alike cell the glyph reader was unsure of (O or Q, B or
# D, H or M) at 0.07-0.35.
PLAUSIBLE_CELL = 0.05


def plausible_but_one(read: LineRead, first: int, name: str) -> bool:
    """Whether the glyph reading of a name field (from position `first` of `read`) is the stored `name` but for
    exactly one cell, where the glyph reader gives the stored symbol at least `PLAUSIBLE_CELL`: a look-alike it was
    unsure of, not a letter it reads plainly otherwise. The stored name is laid out in the field as the zone holds
    it (surname, `<<`, given names joined by `<`, fillers), with whichever split into surname and given names
    differs from the glyph reading in the fewest cells."""
    glyph, words = read.text[first:], name.split()
    if read.cells is None or not words:
        return False
    layouts = ["<".join(words[:k]) + ("<<" + "<".join(words[k:]) if k < len(words) else "")
               for k in range(1, len(words) + 1)]
    stored = min((x.ljust(len(glyph), "<") for x in layouts if len(x) <= len(glyph)), default=None,
                 key=lambda x: sum(a != b for a, b in zip(x, glyph)))
    if stored is None:
        return False
    differing = [i for i, (a, b) in enumerate(zip(stored, glyph)) if a != b]
    return len(differing) == 1 and \
        float(read.cells[first + differing[0], ALPHABET.index(stored[differing[0]])]) >= PLAUSIBLE_CELL


_TWO_LINE_NAME_AT = 5  # a two-line zone's first line: document code (2), issuing state (3), then the name


def name_line(lines: Sequence[OcrLine], name: str) -> tuple[list[OcrLine], int, int] | None:
    """The zone row that holds `name` (its boxes), the zone's line length and where the name field starts.

    The row is found by where the surname stands, not by counting the zone's rows: a data line without fillers is
    not a zone box, and a box lying across the zone adds a row, so the count says little. The lowest row that begins
    with the surname is a TD1 card's third line (30 characters, the name from its start); else a first row holding
    it further on is a two-line zone's first line, whose name starts at its sixth character, 44 characters long
    when the zone is 40 or more long (TD3, MRV-A: `_zone_length`), else 36 (TD2, MRV-B). A data line holding the
    surname's letters by chance (a TD1's number) is never taken for the name line."""
    rows = _zone_rows(lines)
    surname = name.split()[0] if name.split() else ""
    if not surname or not rows:
        return None
    for boxes in reversed(rows):  # a TD1 card's name line is its last
        if _row_text(boxes).translate(TO_ALPHA).startswith(surname):
            return boxes, 30, 0
    # a two-line zone's name line is its first; where that line's start was misread, the two readers' names will
    # differ (a disagreement)
    if _row_text(rows[0]).translate(TO_ALPHA).find(surname) > 0:
        return rows[0], _two_line_width(_zone_length(rows)), _TWO_LINE_NAME_AT
    return None


def _two_line_width(length: float) -> int:
    """A two-line zone's line length from how long its rows read (`_zone_length`): 44 (TD3, MRV-A) from 40 on,
    else 36 (TD2, MRV-B)."""
    return 44 if length >= 40 else 36


def _zone_length(rows: list[list[OcrLine]]) -> float:
    """How many characters long a two-line zone's lines are: the most its rows' text holds, or the width the rows
    span over the boxes' character pitch, whichever is more (the first pass often reads a line in pieces and
    loses some: the fillers at its end, a box with a stray mark)."""
    read = max(len(_row_text(r)) for r in rows)
    boxes = [(x, len(_row_text([x]))) for r in rows for x in r]
    pitches = [(x.right - x.left) / n for x, n in boxes if n >= 8]
    if not pitches:
        return read
    span = max(x.right for x, _ in boxes) - min(x.left for x, _ in boxes)
    return max(read, span / float(np.median(pitches)))


def _zone_rows(lines: Sequence[OcrLine]) -> list[list[OcrLine]]:
    """The zone's boxes grouped into rows, top to bottom, each row's boxes left to right."""
    rows: list[list[OcrLine]] = []
    for box in sorted(zone_boxes_of(lines), key=lambda x: x.middle):
        if rows and box.middle - rows[-1][-1].middle < 0.6 * box.height:
            rows[-1].append(box)
        else:
            rows.append([box])
    return [sorted(r, key=lambda x: x.left) for r in rows]


def _row_text(boxes: Sequence[OcrLine]) -> str:
    return "".join(clean_ocr_line(x.text, spaces_as_filler=False) for x in boxes)


def _located_row(lines: Sequence[OcrLine], boxes: Sequence[OcrLine]) -> Row | None:
    """The zone row (`mrz_reread.locate_rows`: the band's angle and full width) nearest the boxes' middle."""
    located = locate_rows(lines)
    if not located:
        return None
    middle = float(np.mean([x.middle for x in boxes]))
    row = min(located, key=lambda r: abs(r.cy - middle))
    return row if abs(row.cy - middle) < row.height else None
