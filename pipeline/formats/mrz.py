"""ICAO 9303 machine-readable zones: check digits, exact parsing and locating an MRZ in noisy OCR output.

Two entry points with different trust levels:
- `parse` takes MRZ lines that are already exact (right count, right length, MRZ alphabet) and reads them
  as printed, with no correction, so a wrong check digit stays wrong.
- `find` takes raw OCR lines, locates the zone, repairs OCR damage and then reads it. Repairs never guess:
  letters/digits are swapped only where the position class (numeric date, alphabetic country/name) makes
  one reading impossible, and the document number is only changed to a confusion alternative when exactly
  one alternative satisfies the printed check digit (and the composite check, when there is one).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from typing import Collection, Literal, Sequence

from pipeline.formats.dates import yymmdd

MrzFormat = Literal["TD1", "TD2", "TD3", "MRVA", "MRVB"]
DocType = Literal["passport", "id_card", "visa"]

_ALPHABET = re.compile(r"[A-Z0-9<]+")
FRENCH_ID_PREFIX = "IDFRA"  # first line of the 1988-2021 French ID card, which is 2x36 like TD2 but is not TD2
_WIDTH: dict[MrzFormat, int] = {"TD1": 30, "TD2": 36, "TD3": 44, "MRVA": 44, "MRVB": 36}
_LINES: dict[MrzFormat, int] = {"TD1": 3, "TD2": 2, "TD3": 2, "MRVA": 2, "MRVB": 2}
_DOC_TYPE: dict[MrzFormat, DocType] = {"TD1": "id_card", "TD2": "id_card", "TD3": "passport",
                                       "MRVA": "visa", "MRVB": "visa"}


def check_digit(s: str) -> int:
    """ICAO 9303 check digit: digits as is, A-Z = 10..35, '<' = 0, weights 7-3-1, sum mod 10.

    Raises ValueError for an empty string or any character outside the MRZ alphabet (lower case, space):
    such input is not MRZ text, and a computed digit would look like evidence it is.
    """
    if not s or not _ALPHABET.fullmatch(s):
        raise ValueError(f"not MRZ text: {s!r}")
    return sum(_VALUES[c] * w for c, w in zip(s, itertools.cycle((7, 3, 1)))) % 10


_VALUES = {c: 0 if c == "<" else int(c) if c.isdigit() else ord(c) - 55
           for c in "<0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"}


def check_blind(a: str, b: str) -> bool:
    """Whether the check digit cannot tell character `a` from `b`: their values are equal modulo 10 (M = 22 and
    W = 32, A = 10 and K = 20, 0 and A), so each weight (7, 3, 1) times their difference is a multiple of 10 and
    a number read with one for the other passes its check digit. M and W are a common misreading of blur."""
    return a != b and _ALPHABET.fullmatch(a + b) is not None and (_VALUES[a] - _VALUES[b]) % 10 == 0


def is_mrz_text(s: str) -> bool:
    """Only A-Z, 0-9 and '<' (and not empty)."""
    return _ALPHABET.fullmatch(s) is not None


def check_ok(data: str, digit: str) -> bool:
    return digit.isdigit() and _ALPHABET.fullmatch(data) is not None and check_digit(data) == int(digit)


# Failed (in `check_failures`) when letters follow the name's closing filler run; see `_names`.
NAME_FILLERS_CHECK = "mrz.name_fillers"
# Failed when the document number passes its check digit only as repaired (a confusion alternative the check
# digit itself chose) and the printed zone does not show it: the check digit was spent on choosing, so it no
# longer confirms anything.
NUMBER_UNCONFIRMED_CHECK = "repair.mrz_number_unconfirmed"


@dataclass(slots=True)
class MrzResult:
    """One machine-readable zone, decoded. `name` is "SURNAME GIVEN NAMES" single-spaced (None if the name
    line was not read); dates are None when the printed YYMMDD is not a real date."""

    format: MrzFormat
    doc_code: str | None
    country: str | None
    surname: str | None
    given_names: str | None
    name: str | None
    number: str
    birth_date: date | None
    expiry_date: date | None
    sex: str | None
    nationality: str | None
    checks_passed: list[str] = field(default_factory=list)
    checks_failed: list[str] = field(default_factory=list)
    name_debris: bool = False  # letters after the name's closing filler run: the name line was misread
    number_repaired: bool = False  # the number differs from the zone as read: see NUMBER_UNCONFIRMED_CHECK
    # the name field ends in a filler run (a lone '<' may separate two parts of a cut name): the zone holds the
    # whole name, none of it cut off by the field's width
    name_closed: bool = False

    @property
    def valid(self) -> bool:
        """All check digits present in this format pass."""
        return bool(self.checks_passed) and not self.checks_failed

    @property
    def doc_type(self) -> DocType:
        return _DOC_TYPE[self.format]


# --------------------------------------------------------------------------------------------- layouts


@dataclass(frozen=True, slots=True)
class _Raw:
    """The MRZ fields as printed (still with fillers), whatever the layout."""

    doc_code: str
    country: str
    names: str
    number: str
    number_check: str
    overflow: str  # optional data that may continue a >9-character document number (TD1, TD2)
    birth: str
    birth_check: str
    sex: str
    expiry: str
    expiry_check: str
    nationality: str
    personal: str | None  # TD3 personal number (has its own check digit)
    personal_check: str | None
    composite_data: str | None  # None for visas, which have no composite check
    composite_check: str | None


def _split(fmt: MrzFormat, lines: Sequence[str]) -> _Raw:
    if fmt == "TD1":
        l1, l2, l3 = lines
        return _Raw(doc_code=l1[0:2], country=l1[2:5], names=l3, number=l1[5:14], number_check=l1[14],
                    overflow=l1[15:30], birth=l2[0:6], birth_check=l2[6], sex=l2[7], expiry=l2[8:14],
                    expiry_check=l2[14], nationality=l2[15:18], personal=None, personal_check=None,
                    composite_data=l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29], composite_check=l2[29])
    l1, l2 = lines
    width = _WIDTH[fmt]
    is_visa = fmt in ("MRVA", "MRVB")
    return _Raw(doc_code=l1[0:2], country=l1[2:5], names=l1[5:], number=l2[0:9], number_check=l2[9],
                overflow=l2[28:35] if fmt == "TD2" else "", birth=l2[13:19], birth_check=l2[19], sex=l2[20],
                expiry=l2[21:27], expiry_check=l2[27], nationality=l2[10:13],
                personal=l2[28:42] if fmt == "TD3" else None, personal_check=l2[42] if fmt == "TD3" else None,
                composite_data=None if is_visa else l2[0:10] + l2[13:20] + l2[21:width - 1],
                composite_check=None if is_visa else l2[width - 1])


def _field_classes(fmt: MrzFormat) -> list[str]:
    """Per line, one class letter per position: d date digit, n check digit (may be '<'), a alphabetic,
    x the document number, o optional data, s sex, N the name field. Drives the OCR repair in `find`."""
    if fmt == "TD1":
        return ["aaaaa" + "x" * 9 + "n" + "o" * 15,
                "ddddddnsddddddnaaa" + "o" * 11 + "n",
                "N" * 30]
    width = _WIDTH[fmt]
    tail = {"TD3": "o" * 14 + "nn", "TD2": "o" * 7 + "n", "MRVA": "o" * 16, "MRVB": "o" * 8}[fmt]
    line2 = "x" * 9 + "naaaddddddnsddddddn" + tail
    assert len(line2) == width
    return ["aaaaa" + "N" * (width - 5), line2]


# ----------------------------------------------------------------------------------------- decoding


def _names(field_text: str) -> tuple[str, str, bool]:
    """Primary and secondary identifiers: split at the first '<<', remaining fillers become spaces; and
    whether letters follow a second '<<' (debris).

    ICAO 9303 uses '<<' once, between the identifiers; within each a single '<' separates the parts, and
    after the last part only fillers follow. Letters after a second '<<' are fillers misread ("DAVID<<<<C<C")
    or a single '<' read twice ("ANNA<<MARIA"): short tokens are dropped as debris, longer ones kept, and
    either way the reading is flagged so the name is not trusted on its own.
    """
    surname, _, given = field_text.rstrip("<").partition("<<")
    given, gap, rest = given.partition("<<")
    debris = bool(gap and rest.strip("<"))
    if debris and any(len(token) > 2 for token in rest.split("<")):
        given = f"{given}<{rest}"
    return (" ".join(surname.replace("<", " ").split()), " ".join(given.replace("<", " ").split()), debris)


def _code(text: str) -> str | None:
    return text.replace("<", "") or None


_CONFUSABLE = {"0": "OD", "O": "0", "D": "0", "1": "I", "I": "1", "5": "S", "S": "5",
               "8": "B", "B": "8", "2": "Z", "Z": "2", "6": "G", "G": "6", "K": "<"}
_MAX_ALTERNATIVES = 4096


def _number_passes(raw: _Raw) -> bool:
    """Document-number check. Numbers longer than 9 characters put '<' in the check position and continue
    in the optional data, followed by their check digit (ICAO 9303-5 note j; Belgian TD1). Issuers
    disagree on whether that '<' is part of the checked string, so both forms are accepted."""
    if raw.number_check == "<" and raw.overflow[:1].isalnum():
        rest = raw.overflow.split("<", 1)[0]
        if len(rest) < 2:
            return False
        head, digit = raw.number + "<" + rest[:-1], rest[-1]
        return check_ok(head.replace("<", "", 1), digit) or check_ok(head, digit)
    return check_ok(raw.number, raw.number_check)


def _resolve_number(raw: _Raw, confirmed: Collection[str] | None) -> tuple[_Raw, bool]:
    """The document-number reading to keep and whether its check digit passes.

    With `confirmed` (repair mode: the other text on the page), a number printed on the page that passes
    the check digit is taken first (`_printed_alternatives`), then one that passes the composite once its check
    digit is recomputed (`_rechecked_printed`: OCR lost the digit); then OCR confusion alternatives are tried.
    An alternative is kept only when it is the single one that passes the check digit; if several pass,
    the single one also printed elsewhere on the page, else the single one needing the fewest
    substitutions. (For those the composite cannot help: the number sits at the same weights in the
    composite, so every alternative passing the number check also passes the composite.)
    """
    if _number_passes(raw) or confirmed is None:
        return raw, _number_passes(raw)
    printed = [r for r in _printed_alternatives(raw, confirmed) if _number_passes(r)]
    if len(printed) == 1:
        return printed[0], True
    rechecked = _rechecked_printed(raw, confirmed)
    if len(rechecked) == 1:
        return rechecked[0], True
    options = [c + _CONFUSABLE.get(c, "") for c in raw.number]
    if math.prod(len(o) for o in options) > _MAX_ALTERNATIVES:
        return raw, False
    if raw.number_check == "<" and raw.overflow[:1].isalnum():  # the check digit is in the optional data
        hits = [r for combo in itertools.product(*options)
                if _number_passes(r := _replace_number(raw, "".join(combo)))]
    else:  # the check over the number alone: the up to 4,096 strings are checked before any is made a reading
        hits = [_replace_number(raw, number) for number in map("".join, itertools.product(*options))
                if check_ok(number, raw.number_check)]
    if len(hits) > 1:
        on_page = [r for r in hits if r.number.replace("<", "") in confirmed]
        if len(on_page) == 1:
            hits = on_page
        else:
            edits = [sum(a != b for a, b in zip(r.number, raw.number)) for r in hits]
            hits = [r for r, e in zip(hits, edits) if e == min(edits)]
    return (hits[0], True) if len(hits) == 1 else (raw, False)


def _printed_alternatives(raw: _Raw, page_tokens: Collection[str]) -> list[_Raw]:
    """`raw` with each number printed on the page that could be the zone's own misread: as long, with a
    digit, at most three characters different (blur turns 8 into 0, which no confusion table allows). One
    that passes the zone's check digit is confirmed twice, by the printed zone and by the check digit."""
    own = raw.number.rstrip("<")
    return [_replace_number(raw, t.ljust(len(raw.number), "<")) for t in sorted(page_tokens)
            if len(t) == len(own) and t != own and any(c.isdigit() for c in t)
            and sum(a != b for a, b in zip(t, own)) <= 3]


def _rechecked_printed(raw: _Raw, page_tokens: Collection[str]) -> list[_Raw]:
    """When OCR lost the number's own check digit (read as a letter, or blurred into another digit): each number
    printed on the page (the zone's own reading too, if printed) with that digit recomputed, kept when the
    composite digit, which covers the number and its check digit, then passes, and passes for no other mix of
    the printed and the zone's characters where the two differ. The composite alone is weak here: a character
    changed by 5 changes the recomputed check digit by a multiple of 5 too and the two cancel out (a printed 3
    read as 8 would pass); the zone's reading of that character then passes as well, and nothing is taken."""
    if raw.composite_data is None or raw.composite_check is None or raw.number_check == "<":
        return []
    own = [raw] if raw.number.rstrip("<") in page_tokens else []
    kept = []
    for alternative in own + _printed_alternatives(raw, page_tokens):
        differ = [i for i, (a, b) in enumerate(zip(alternative.number, raw.number)) if a != b]
        mixes = ["".join(c) for c in itertools.product(*(
            {alternative.number[i], raw.number[i]} if i in differ else alternative.number[i]
            for i in range(len(raw.number))))]
        passing = [r for r in (_with_check_digit(raw, m) for m in mixes) if _composite_ok(r)]
        if [r.number for r in passing] == [alternative.number]:
            kept.append(passing[0])
    return kept


def _with_check_digit(raw: _Raw, number: str) -> _Raw:
    """`raw` with `number` and the check digit computed for it, in the composite data too."""
    digit = str(check_digit(number))
    data = _replace_number(raw, number).composite_data
    assert data is not None
    return dataclasses.replace(raw, number=number, number_check=digit,
                               composite_data=data[:len(number)] + digit + data[len(number) + 1:])


def _replace_number(raw: _Raw, number: str) -> _Raw:
    """`raw` with a different document number, keeping the composite data consistent with it."""
    data = raw.composite_data
    if data is not None:
        data = number + data[len(number):]
    return dataclasses.replace(raw, number=number, composite_data=data)


def _composite_ok(raw: _Raw) -> bool:
    return raw.composite_data is not None and raw.composite_check is not None and \
        check_ok(raw.composite_data, raw.composite_check)


def _decode(fmt: MrzFormat, lines: Sequence[str], today: date, *, confirmed: Collection[str] | None = None,
            has_name_line: bool = True) -> MrzResult:
    """Decode fixed-width lines; `confirmed` (page tokens) enables document-number repair."""
    as_read = _split(fmt, lines)
    raw, number_ok = _resolve_number(as_read, confirmed)
    passed: list[str] = []
    failed: list[str] = []

    def record(name: str, ok: bool) -> None:
        (passed if ok else failed).append(name)

    record("mrz.number", number_ok)
    record("mrz.birth", check_ok(raw.birth, raw.birth_check))
    expiry = yymmdd(raw.expiry, kind="expiry", today=today)
    # A check digit that passes over a date no document can carry (a 31 February, an expiry past the longest
    # validity) vouches for a misread: one substitution in ten keeps the digit.
    record("mrz.expiry", check_ok(raw.expiry, raw.expiry_check) and expiry is not None)
    if raw.personal is not None and raw.personal_check is not None:
        empty = raw.personal.strip("<") == ""
        record("mrz.personal", (empty and raw.personal_check in "<0") or check_ok(raw.personal, raw.personal_check))
    if raw.composite_data is not None:
        record("mrz.composite", _composite_ok(raw))

    number = raw.number
    if raw.number_check == "<" and raw.overflow[:1].isalnum():
        number += raw.overflow.split("<", 1)[0][:-1]
    surname, given, debris = _names(raw.names) if has_name_line else (None, None, False)
    name = (" ".join(p for p in (surname, given) if p) or None) if has_name_line else None
    return MrzResult(
        format=fmt, doc_code=_code(raw.doc_code) if has_name_line else None,
        country=_code(raw.country) if has_name_line else None,
        surname=surname, given_names=given, name=name, number=number.replace("<", ""),
        birth_date=yymmdd(raw.birth, kind="birth", today=today),
        expiry_date=expiry,
        sex=raw.sex if raw.sex in ("M", "F", "X") else None, nationality=_code(raw.nationality),
        checks_passed=passed, checks_failed=failed, name_debris=debris, number_repaired=raw.number != as_read.number,
        name_closed=has_name_line and raw.names.endswith("<<"))


def _format_of(lines: Sequence[str]) -> MrzFormat | None:
    widths = {len(x) for x in lines}
    if len(widths) != 1:
        return None
    width = widths.pop()
    visa = lines[0][:1] == "V"
    if len(lines) == 3 and width == 30:
        return "TD1"
    if len(lines) == 2 and width == 44:
        return "MRVA" if visa else "TD3"
    if len(lines) == 2 and width == 36:
        # The 1988-2021 French national ID card is 2x36 but not ICAO TD2 (different field layout).
        return None if lines[0].startswith(FRENCH_ID_PREFIX) else "MRVB" if visa else "TD2"
    return None


def parse(lines: Sequence[str], today: date) -> MrzResult | None:
    """Decode exact MRZ lines (TD1 3x30, TD2 2x36, TD3 2x44, MRV-A 2x44 and MRV-B 2x36 starting 'V').

    No OCR repair: the lines are read as printed. None when the shape or alphabet is not an ICAO MRZ.
    """
    lines = [x.strip() for x in lines]
    if not all(_ALPHABET.fullmatch(x) for x in lines):
        return None
    fmt = _format_of(lines)
    return _decode(fmt, lines, today) if fmt else None


# ------------------------------------------------------------------------------------------ finding

_FILLER_LOOKALIKES = str.maketrans({c: "<" for c in "«‹＜〈(<[{>≤Λ∧"})
_TO_DIGIT = str.maketrans("OQDIZSGB", "00012568")
# A letter field's characters read as digits (or "]": a J with its top bar lost, NOVAK<<]AN), as the decoder reads
# them; one character for one, so positions (and per-character probabilities) still line up.
TO_ALPHA = str.maketrans("012568]", "OIZSGBJ")
# '|' is no MRZ character; before a document code (then a letter or filler) it is a stroke, not text. Not before a
# filler: "|<UTO" is an ID card's "I<UTO". A re-read strip that caught the card's edge may begin with a run of
# them, a speck among the strokes ("||||m||P<AUS...").
_STROKE_BEFORE_CODE = re.compile(r"^.?\|(?:[^|]?\|)*(?=[PIACV][A-Z<])")


def clean_ocr_line(text: str, *, spaces_as_filler: bool) -> str:
    """Upper case, filler look-alikes as '<', spaces dropped or read as fillers, and a stray stroke before a
    line's document code dropped ("|P<UTO...", "0|P<IRL...", "||.||P<AUS": the card's edge in a dark photo read as
    text)."""
    s = unicodedata.normalize("NFKC", text).upper().translate(_FILLER_LOOKALIKES)
    s = _STROKE_BEFORE_CODE.sub("", s.strip())
    return re.sub(r"\s+", "<" if spaces_as_filler else "", s)


def ocr_segments(lines: Sequence[str], *, spaces_as_filler: bool) -> list[str]:
    """The cleaned OCR lines that may be MRZ text, in reading order (input to `assemble_lines`)."""
    return [s for x in lines if looks_like_mrz(s := clean_ocr_line(x, spaces_as_filler=spaces_as_filler))]


def looks_like_mrz(s: str) -> bool:
    """MRZ alphabet, and a filler (or a filler run read as KK) or mostly digits: keeps plain words
    (SPECIMEN, CANADA) out of line assembly, where they would be glued onto a real MRZ fragment."""
    if len(s) < 5 or sum(c.isascii() and (c.isalnum() or c == "<") for c in s) < 0.9 * len(s):
        return False
    return "<" in s or "KK" in s or sum(c.isdigit() for c in s) >= 0.5 * len(s)


@functools.lru_cache(maxsize=4096)
def repair_chars(line: str, classes: str) -> str:
    """Letter/digit swaps that the position class makes unambiguous (a date cannot contain 'O'), and
    filler runs read as K at the end of optional data (check digits then confirm or reject).

    Cached: a zone search repairs the same line under each format of its width and for each window it is in."""
    out = []
    for c, k in zip(line, classes):
        if k in "dn":
            c = "<" if c == "K" else c.translate(_TO_DIGIT)
        elif k in "aN":
            c = c.translate(TO_ALPHA)
        out.append(c)
    text = "".join(out)
    for m in re.finditer(r"o+", classes):
        segment = re.sub(r"K{2,}(?=<*$)", lambda k: "<" * len(k.group()), text[m.start():m.end()])
        text = text[:m.start()] + segment + text[m.end():]
    return text


_NOISE_TOKEN = re.compile(r"[KS]{2,}|A{3,}")


def repair_name_field(field_text: str) -> str:
    """Undo the filler misreads OCR makes in the name field: '<' runs read as K (and S, or A for the
    chevrons' apex).

    Without any '<<' the field has lost all its filler runs, so K-runs and runs of four or more A are
    fillers (the surname/given separator included). A trailing token made only of K/S letters or of three
    or more A is not a name, and no name ends in "KKK" or "AAA"; all of these are filler.
    """
    if "<<" not in field_text:
        field_text = re.sub(r"K{2,}|A{4,}", lambda k: "<" * len(k.group()), field_text)
    tokens = field_text.split("<")
    while tokens and (tokens[-1] == "" or _NOISE_TOKEN.fullmatch(tokens[-1])):
        tokens.pop()
    if tokens:
        tokens[-1] = re.sub(r"(K{3,}|A{3,})$", "", tokens[-1])
    text = "<".join(tokens)
    return text + "<" * (len(field_text) - len(text))


_MAX_MISCOUNTED_FILLERS = 3  # fillers a long run may have gained or lost in OCR


def fit_width(line: str, width: int, is_name: bool) -> list[str]:
    """Candidate exact-width versions of an OCR line: first padded/truncated at the end (fillers are lost
    or doubled mostly at the end); for data lines, then its longest run of fillers lengthened or shortened to
    fit (OCR miscounts long runs of '<', e.g. the optional data before a TD3 line's last two digits), and
    for lines off by one, a filler inserted or a character dropped at each position (shape and checks then
    pick the right one)."""
    as_read = (line + "<" * width)[:width]
    if is_name:
        return [as_read]
    candidates = [as_read]
    runs = [m for m in re.finditer(r"<{3,}", line) if m.end() < len(line)]  # a run at the end is padded anyway
    missing = width - len(line)
    if runs and missing and abs(missing) <= _MAX_MISCOUNTED_FILLERS:
        run = max(runs, key=lambda m: m.end() - m.start())
        if run.end() - run.start() + missing >= 1:
            candidates.append(line[:run.start()] + "<" * (run.end() - run.start() + missing) + line[run.end():])
    if len(line) == width - 1:
        candidates += [line[:i] + "<" + line[i:] for i in range(width - 1)]
    elif len(line) == width + 1:
        candidates += [line[:i] + line[i + 1:] for i in range(len(line) - 1)]
    return candidates


@functools.lru_cache(maxsize=4096)
def shape_mismatches(line: str, classes: str) -> int:
    """Positions whose character contradicts the layout even after the OCR-confusion repair (an 'X' or a
    filler in a date, a '7' in a country code): how badly a length repair misaligned the line. Cached, as
    `repair_chars` is."""
    return sum((k == "d" and not c.isdigit()) or (k == "n" and c.isalpha()) or (k == "a" and c.isdigit())
               for c, k in zip(line, classes))


def _score(r: MrzResult) -> float:
    return len(r.checks_passed) - len(r.checks_failed) * 0.5 + (1.0 if r.name else 0.0)


_SHORT_NAME_LINE = 10  # "P<UTOLI<<A": the shortest name line with a surname and a given name


def _decode_noisy(fmt: MrzFormat, lines: list[str], today: date, has_name_line: bool,
                  page_tokens: Collection[str]) -> tuple[MrzResult, int] | None:
    """Best repair of OCR lines for one format with its count of layout mismatches, or None when the
    lines are too far from the format's shape. Name lines only need their start: fillers at the end are
    often lost."""
    width = _WIDTH[fmt]
    name_index = 2 if fmt == "TD1" else 0
    # Lines that may end in a run of fillers OCR drops: the name line, and TD1's first line (optional data).
    tail_lines = {name_index, 0} if fmt == "TD1" else {name_index}
    for i, x in enumerate(lines):
        # A short name line that lost its closing fillers is whole once it shows the surname/given separator
        # ("P<CANKIM<<ALICE<<", "V<SWENOVAK<<JAN<DAVID").
        shortest = _SHORT_NAME_LINE if i == name_index and "<<" in x[5:] else width // 2
        if not (shortest <= len(x) <= width + 3 if i in tail_lines else abs(len(x) - width) <= max(3, width // 6)):
            return None
    classes = _field_classes(fmt)
    name_start = 0 if fmt == "TD1" else 5
    per_line: list[list[tuple[str, int]]] = []
    for i, (line, cls) in enumerate(zip(lines, classes)):
        variants = []
        lost_tail = i == name_index or (i in tail_lines and len(line) < width - 1)
        for v in fit_width(line, width, is_name=lost_tail):
            fixed = repair_chars(v, cls)
            if i == name_index:
                fixed = fixed[:name_start] + repair_name_field(fixed[name_start:])
            variants.append((fixed, shape_mismatches(fixed, cls)))
        per_line.append(variants)
    if fmt == "TD2" and has_name_line and per_line[0][0][0].startswith(FRENCH_ID_PREFIX):
        return None  # the 1988-2021 French ID card: 2x36 too, but its own layout (pipeline.formats.french_id)
    # A combination's mismatches are at least the sum of each line's fewest: past what `_convincing` allows, no
    # combination could be kept, so none is decoded (a TD1 card's lines tried as TD2 cost ~2.5 ms each otherwise).
    if sum(min(m for _, m in variants) for variants in per_line) > _allowed_mismatches(has_name_line):
        return None
    # A length repair (variant > 0: a filler inserted or a character dropped somewhere) already spends the
    # check digits' evidence on choosing where; such a reading must pass every check and contradict the
    # layout nowhere ('<' weighs 0 like '0', so a filler put where a zero was lost passes the checks).
    # Document-number alternatives are tried only on the line as read (padded/truncated at the end).
    best: tuple[MrzResult, int] | None = None
    for combo in itertools.product(*(list(enumerate(v)) for v in per_line)):
        texts = tuple(t for _, (t, _) in combo)
        if not all(_ALPHABET.fullmatch(x) for x in texts):
            continue
        length_repaired = any(i > 0 for i, _ in combo)
        r = _decode(fmt, texts, today, confirmed=None if length_repaired else page_tokens,
                    has_name_line=has_name_line)
        mismatches = sum(m for _, (_, m) in combo) + _layout_errors(fmt, _split(fmt, texts), has_name_line)
        if length_repaired and (r.checks_failed or mismatches):
            continue
        if best is None or _score(r) - mismatches > _score(best[0]) - best[1]:
            best = (r, mismatches)
    return best


# The characters a format's document code may start with (ICAO 9303).
DOC_CODE_START: dict[MrzFormat, str] = {"TD1": "ACI", "TD2": "ACI", "TD3": "P", "MRVA": "V", "MRVB": "V"}


def _layout_errors(fmt: MrzFormat, raw: _Raw, has_name_line: bool) -> int:
    """Structural contradictions: a document code that does not start as the format requires, and codes
    or numbers with a character after a filler although these fields are left-justified (the signature
    of a filler inserted at the wrong place by a length repair)."""
    fields = [raw.number, raw.nationality] + ([raw.doc_code, raw.country] if has_name_line else [])
    wrong_code = has_name_line and raw.doc_code[:1] not in DOC_CODE_START[fmt]
    return sum(re.search(r"<[^<]", f) is not None for f in fields) + wrong_code


_KEY_CHECKS = ("mrz.number", "mrz.birth", "mrz.expiry")


def _allowed_mismatches(has_name_line: bool) -> int:
    """The layout contradictions a convincing reading may have: a few, none for a lone data line."""
    return 2 if has_name_line else 0


def _convincing(r: MrzResult, mismatches: int, has_name_line: bool) -> bool:
    """Enough independent evidence that this is a real MRZ and not text that fits by chance: two check
    digits (a random string passes one with p = 0.1) and few layout contradictions; a lone data line needs
    all three field checks, real dates and a clean layout."""
    if mismatches > _allowed_mismatches(has_name_line):
        return False
    if not has_name_line:
        return all(c in r.checks_passed for c in _KEY_CHECKS) and r.birth_date is not None and r.expiry_date is not None
    return len(r.checks_passed) >= 2


def assemble_lines(segments: list[str], width: int) -> list[str]:
    """Rebuild MRZ lines of `width` from OCR segments: split segments holding several lines, join
    consecutive fragments of one line."""
    lines: list[str] = []
    buffer = ""
    for seg in segments:
        pieces = [seg]
        for k in (3, 2):
            if abs(len(seg) - k * width) <= k:
                pieces = [seg[i * width:(i + 1) * width] for i in range(k - 1)] + [seg[(k - 1) * width:]]
                break
        for piece in pieces:
            if buffer and len(buffer) + len(piece) <= width + 1:
                buffer += piece
            else:
                if buffer:
                    lines.append(buffer)
                buffer = piece
            if len(buffer) >= width - 1:
                lines.append(buffer)
                buffer = ""
    if buffer:
        lines.append(buffer)
    return lines


def find(lines: Sequence[str], today: date, printed: Collection[str] = ()) -> MrzResult | None:
    """Locate and decode an MRZ among OCR text lines (reading order), repairing OCR damage.

    Handles lines split into fragments or joined together, fillers read as K/«/(/space, letter-digit
    confusions (by position class) and a missing name line (number and dates are still check-digit
    protected). Returns the reading with the most passing checks, or None when no candidate passes at
    least two check digits — fewer could be chance. `printed`: other text of the page, not zone lines (a VLM
    answer's number), that may confirm a repaired document number as the page's own words do.
    """
    page_tokens = frozenset(t for x in [*lines, *printed] for t in re.split(r"[^0-9A-Z]+", x.upper()) if t)
    best: MrzResult | None = None
    best_score = 0.0
    tried: list[list[str]] = []
    for spaces_as_filler in (False, True):
        segments = ocr_segments(lines, spaces_as_filler=spaces_as_filler)
        if segments in tried:  # lines without spaces (a VLM's zone): the same windows, the same best
            continue
        tried.append(segments)
        for fmt in ("TD3", "MRVA", "TD2", "MRVB", "TD1"):
            n = _LINES[fmt]
            windows: dict[tuple[tuple[str, ...], bool], None] = {}
            # Assembled from every starting segment too: a short digit-rich line above the zone ("160 cm")
            # would otherwise be glued in front of a first line that lost its trailing fillers.
            for start in range(len(segments)):
                assembled = assemble_lines(segments[start:], _WIDTH[fmt])
                windows.update(((tuple(assembled[i:i + n]), True), None) for i in range(len(assembled) - n + 1))
                if n == 2:  # the name line may be lost (glare, low contrast): decode the data line alone
                    windows.update(((("<" * _WIDTH[fmt], x), False), None) for x in assembled)
            for window, has_name in windows:
                decoded = _decode_noisy(fmt, list(window), today, has_name, page_tokens)
                if decoded is None or not _convincing(*decoded, has_name):
                    continue
                r, mismatches = decoded
                if best is None or _score(r) - mismatches > best_score:
                    best, best_score = r, _score(r) - mismatches
    return best
