"""Document reading: OCR lines of one page -> document type, the three record fields and their evidence.

Order of trust: a machine-readable zone (check digits: ICAO 9303, the 1988-2021 French ID card, EU
driving licences) beats the printed visual zone; a PRC ID number (checksum) is read from the portrait side
and the expiry from the emblem side. Anything not supported by text on the page stays None: a field the
document type/side does not carry is `absent`, a field it should carry but that could not be read reliably
is `unreadable`, and so is a field whose two readings contradict each other with nothing to decide between
them, or a name that does not look like a name.
"""

from __future__ import annotations

import difflib
import itertools
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import date
from statistics import mean
from typing import Literal, Protocol, Sequence

from pipeline.datamodel import FIELD_NAMES, FieldReading
from pipeline.fields import cn_id, cn_permanent_residence, driving_licence, french_id, mrz
from pipeline.fields.dates import parse_printed_dates
from pipeline.fields.mrz import NAME_FILLERS_CHECK, NUMBER_UNCONFIRMED_CHECK
from pipeline.fields.names import looks_like_name

DocumentType = Literal["cn_id", "passport", "id_card", "visa", "driving_licence", "cn_permanent_residence",
                       "unknown"]

# Confidence multipliers: a failed check digit halves trust; a name has no check digit of its own.
_CHECK_FAILED = 0.5
_UNCHECKED_NAME = 0.85
_CROSS_DISAGREES = 0.5
_HEURISTIC = 0.5  # value found by position/shape rather than a label (visual zone without MRZ)
# Below this similarity a printed name and a zone name are different names, not one name with a misprint
# or OCR slip (ERIKKSON/ERIKSSON on the ICAO specimen): neither can be trusted over the other.
_SAME_NAME_RATIO = 0.8
# Passed (in `checks`) when the name is the printed one because it continues the zone's (`_printed_extension`).
NAME_EXTENDED_CHECK = "cross.name_printed_extends_mrz"


@dataclass(frozen=True, slots=True)
class OcrLine:
    """One OCR text box: text, recognition score in [0, 1], 4 corner points in image coordinates."""

    text: str
    score: float
    box: tuple[tuple[float, float], ...]

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


@dataclass(slots=True)
class DocumentReading:
    """What one page says. `fields` holds the schema keys (`name`, `id_number`, `expiry_date` as ISO date,
    "long-term" or None); `score` ranks alternative readings of the same page (e.g. 0 deg vs 180 deg)."""

    doc_type: DocumentType
    fields: dict[str, str | None]
    states: dict[str, FieldReading]
    checks: list[str] = field(default_factory=list)
    check_failures: list[str] = field(default_factory=list)
    score: float = 0.0


# ------------------------------------------------------------------------------------------ layout


def _rows(lines: Sequence[OcrLine]) -> list[list[OcrLine]]:
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


def _fold(text: str) -> str:
    """Upper case, accents removed, non-letters as single spaces: for comparing names across zones."""
    decomposed = unicodedata.normalize("NFKD", text.upper())
    letters = "".join(c if c.isalpha() else " " for c in decomposed if not unicodedata.combining(c))
    return " ".join(letters.split())


# ------------------------------------------------------------------------------------- visual zone

_LABELS: dict[str, tuple[str, ...]] = {
    "surname": ("surname", "primary identifier", "apellidos", "nom", "mbiemri", "soyadi", "nazwisko"),
    "given": ("given names", "given name", "secondary identifier", "prenoms", "nombres", "emri", "vorname",
              "given name patronymic", "given names patronymic"),
    "name": ("name", "nombre", "name surname given names"),
    "number": ("passport no", "document no", "passport number", "card no", "no of document", "numero"),
    "expiry": ("date of expiry", "expiry", "valid until", "expiration date", "date d expiration",
               "fecha de caducidad", "gultig bis", "date of expiration"),
    "personal": ("personal no", "personal number", "nr personal", "personal id no"),
}


def _label_kind(text: str) -> str | None:
    """Which field a label box names, matching each '/'-separated language variant fuzzily (OCR mangles
    small label print). Each "m" read is also tried as "rn": small print's "rn" is read as "m" so often
    ('Sumame', 'Sumtame' for 'Surname') that a plain ratio would lose the label. Only that way round: comparing
    "rn" as "m" on both sides shortens the labels, and short debris ('Suae') would then pass for one."""
    best, best_ratio = None, 0.0
    for part in re.split(r"[/|]", text):
        folded = _fold(part).lower()
        if not folded:
            continue
        for kind, words in _LABELS.items():
            for word, read in itertools.product(words, _rn_readings(folded)):
                ratio = difflib.SequenceMatcher(None, read, word).ratio()
                if ratio > best_ratio:
                    best, best_ratio = kind, ratio
    return best if best_ratio >= 0.8 else None


def _rn_readings(text: str) -> set[str]:
    """`text`, and `text` with each one of its first three "m"s, or all of them, read as "rn"."""
    spots = [i for i, c in enumerate(text) if c == "m"][:3]
    return {text, text.replace("m", "rn")} | {text[:i] + "rn" + text[i + 1:] for i in spots}


def _value_below(label: OcrLine, lines: Sequence[OcrLine]) -> OcrLine | None:
    """The nearest box under a label that starts in the label's column (printed zones put values there); never
    zone text (a printed value has no `<`): on a page whose last label sits just above the MRZ, the zone's first
    line is not that label's value."""
    below = [x for x in lines if x is not label and x.top > label.middle and x.top - label.bottom < 2.5 * label.height
             and abs(x.left - label.left) < 3 * label.height and "<" not in x.text and _label_kind(x.text) is None]
    return min(below, key=lambda x: x.top) if below else None


@dataclass(slots=True)
class _Printed:
    """Visual-zone values with the OCR score of the box they came from."""

    values: dict[str, tuple[str, float]] = field(default_factory=dict)
    personal: set[str] = field(default_factory=set)  # values of personal-number labels (not doc numbers)


def _read_printed(lines: Sequence[OcrLine]) -> _Printed:
    printed = _Printed()
    for line in lines:
        kind = _label_kind(line.text)
        if kind is None or kind in printed.values:
            continue
        value = _value_below(line, lines)
        if value is None:
            continue
        if kind == "personal":
            printed.personal.add(re.sub(r"\s+", "", value.text.upper()))
        else:
            printed.values[kind] = (value.text.strip(), value.score)
    return printed


def _printed_name(printed: _Printed) -> tuple[str, float] | None:
    if "surname" in printed.values and "given" in printed.values:
        (s, s_score), (g, g_score) = printed.values["surname"], printed.values["given"]
        return f"{s} {g}", min(s_score, g_score)
    return printed.values.get("name")


_NUMBER_SHAPE = re.compile(r"[A-Z]{0,2}\d{6,10}[A-Z]?")


def _unlabelled_number(lines: Sequence[OcrLine], printed: _Printed) -> tuple[str, float] | None:
    """The single box shaped like a document number (letters + 6-10 digits), excluding personal numbers;
    None when there is not exactly one."""
    hits = {(t, x.score) for x in lines if _NUMBER_SHAPE.fullmatch(t := re.sub(r"\s+", "", x.text.upper()))
            and t not in printed.personal}
    return hits.pop() if len(hits) == 1 else None


def _latest_date(lines: Sequence[OcrLine], today: date) -> tuple[str, float] | None:
    """With birth, issue and expiry dates printed (>= 3 distinct four-digit-year dates), the latest one is
    the expiry: used only when no expiry label was read."""
    dated = {d: x.score for x in lines if re.search(r"\d{4}", x.text) for d in parse_printed_dates(x.text, today=today)}
    if len(dated) < 3:
        return None
    latest = max(dated)
    return latest.isoformat(), dated[latest]


# ----------------------------------------------------------------------------------------- reading


@dataclass(slots=True)
class _Builder:
    fields: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(FIELD_NAMES))
    states: dict[str, FieldReading] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def present(self, key: str, value: str, confidence: float) -> None:
        if key == "name" and not looks_like_name(value):
            self.failures.append("name.shape")
            return self.unreadable(key)
        self.fields[key] = value
        self.states[key] = FieldReading(value, "present", round(min(max(confidence, 0.0), 1.0), 3))

    def absent(self, key: str) -> None:
        self.states[key] = FieldReading.absent()

    def unreadable(self, key: str) -> None:
        self.fields[key] = None
        self.states[key] = FieldReading(None, "unreadable", 0.0)

    def finish(self, doc_type: DocumentType) -> DocumentReading:
        for key in FIELD_NAMES:
            self.states.setdefault(key, FieldReading(None, "unreadable", 0.0))
        present = [s.confidence for s in self.states.values() if s.state == "present"]
        score = len(self.checks) - 0.5 * len(self.failures) + (mean(present) if present else 0.0)
        return DocumentReading(doc_type, self.fields, self.states, self.checks, self.failures, round(score, 3))


class Zone(Protocol):
    """What every machine-readable zone reader returns (`mrz.MrzResult`, `french_id.FrenchIdResult`,
    `driving_licence.LicenceZone`): values are None where the zone does not carry them."""

    @property
    def doc_type(self) -> DocumentType: ...
    @property
    def name(self) -> str | None: ...
    @property
    def number(self) -> str | None: ...
    @property
    def expiry_date(self) -> date | None: ...
    @property
    def checks_passed(self) -> list[str]: ...
    @property
    def checks_failed(self) -> list[str]: ...


def _zone_score(zone: Zone) -> float:
    return len(zone.checks_passed) - 0.5 * len(zone.checks_failed)


def _find_zone(rows: list[str], today: date) -> Zone | None:
    """The best-checked machine-readable zone on the page, whatever its format."""
    found: list[Zone] = [z for z in (mrz.find(rows, today), french_id.find(rows, today),
                                     driving_licence.find(rows, today)) if z is not None]
    return max(found, key=_zone_score) if found else None


def _read_zone(zone: Zone, lines: Sequence[OcrLine], printed: _Printed, today: date, b: _Builder) -> None:
    """Fields from the machine-readable zone, cross-checked against the printed zone.

    The cross-checks pass when the zone value is printed elsewhere on the page (name words after
    transliteration; number verbatim). They fail only when a labelled printed value exists and differs:
    label association is approximate, so absence of evidence is not treated as disagreement. A name with
    no check digit whose printed reading is a different name is unreadable: neither reading is evidence
    for itself.
    """
    zone_boxes = zone_boxes_of(lines)
    printed_boxes = [x for x in lines if x not in zone_boxes]
    seeds = [x for x in zone_boxes if _filler_rich(x)]
    base = mean(x.score for x in seeds) if seeds else mean(x.score for x in lines)
    b.checks += zone.checks_passed
    b.failures += zone.checks_failed

    def cross(check: str, agrees: bool, disagrees: bool) -> float:
        if agrees:
            b.checks.append(check)
            return 1.0
        if disagrees:
            b.failures.append(check)
            return _CROSS_DISAGREES
        return 1.0

    viz_name = _printed_name(printed)
    truncated_surname = getattr(zone, "surname", None) if zone.doc_type == "driving_licence" else None
    if zone.name and not looks_like_name(zone.name):  # zone debris (digits): as if the name line was lost
        b.failures.append("name.shape")
    if getattr(zone, "name_debris", False):
        b.failures.append(NAME_FILLERS_CHECK)
    if zone.name and looks_like_name(zone.name):
        words = {w for x in printed_boxes for w in _fold(x.text).split()}
        name = _as_printed(zone.name, words, getattr(zone, "name_debris", False))
        fuller = _printed_extension(name, viz_name[0]) if viz_name is not None else None
        agrees = set(name.split()) <= words
        disagrees = viz_name is not None and _fold(viz_name[0]) != _fold(name)
        if fuller is not None:  # the printed full name (patronymic, more given names) continues the zone's
            b.checks.append(NAME_EXTENDED_CHECK)
            b.present("name", fuller, min(base, viz_name[1]))
        elif _printed_beyond(name, printed_boxes):  # its words are printed, but the print goes on: incomplete
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
        elif not agrees and disagrees and \
                difflib.SequenceMatcher(None, _fold(viz_name[0]), _fold(name)).ratio() < _SAME_NAME_RATIO:
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
        else:
            factor = cross("cross.name_mrz_vs_viz", agrees, disagrees)
            b.present("name", name, base * factor * (1.0 if agrees else _UNCHECKED_NAME))
    elif viz_name is not None and truncated_surname:  # licence: the zone holds the surname's first 8 letters
        if _fold(viz_name[0]).replace(" ", "").startswith(truncated_surname.replace(" ", "")):
            b.checks.append("cross.name_mrz_vs_viz")
            b.present("name", " ".join(viz_name[0].split()), viz_name[1] * _UNCHECKED_NAME)
        else:
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
    elif viz_name is not None:  # name line lost or not decoded: the printed name is the only source
        b.present("name", " ".join(viz_name[0].split()), viz_name[1] * _HEURISTIC)

    viz_number = printed.values.get("number")
    if zone.number:
        flat = {re.sub(r"\s+", "", x.text.upper()) for x in printed_boxes}
        agrees = any(zone.number in t for t in flat)
        # visas print several document numbers (visa, passport), so a differing labelled one proves nothing
        disagrees = zone.doc_type != "visa" and viz_number is not None and \
            re.sub(r"\s+", "", viz_number[0].upper()) != zone.number
        factor = cross("cross.number_mrz_vs_viz", agrees, disagrees)
        repaired = getattr(zone, "number_repaired", False)
        if repaired and not agrees:
            b.failures.append(NUMBER_UNCONFIRMED_CHECK)
        unlabelled = _unlabelled_number(printed_boxes, printed)
        prints_another = disagrees or (unlabelled is not None and unlabelled[0] != zone.number)
        if prints_another and not agrees and (repaired or "mrz.number" in zone.checks_failed):
            # its own digit does not vouch for it (failed, or chose the repair) and the page prints another number
            # (labelled, or the one number-shaped box on it)
            b.unreadable("id_number")
        else:
            b.present("id_number", zone.number, base * factor * _check_factor(zone, "mrz.number"))
    elif zone.doc_type == "driving_licence" and viz_number is not None:  # issuer layout not decoded
        b.present("id_number", re.sub(r"\s+", "", viz_number[0].upper()), viz_number[1] * _HEURISTIC)

    born = getattr(zone, "birth_date", None)
    if born is not None and any(born in parse_printed_dates(x.text, today=today) for x in printed_boxes):
        b.checks.append("cross.birth_mrz_vs_viz")  # positive evidence only: a page prints several dates
    if zone.expiry_date is not None:
        factor = _expiry_factor(zone)
        viz_expiry = printed.values.get("expiry")
        if zone.doc_type == "driving_licence" and viz_expiry is not None:  # no expiry digit of its own
            agrees = zone.expiry_date in parse_printed_dates(viz_expiry[0], today=today)
            factor *= cross("cross.expiry_mrz_vs_viz", agrees, not agrees)
        b.present("expiry_date", zone.expiry_date.isoformat(), base * factor)
    elif isinstance(zone, french_id.FrenchIdResult):
        _read_french_expiry(lines, today, b)
    elif zone.doc_type == "driving_licence" and (viz_expiry := printed.values.get("expiry")) is not None:
        dates = parse_printed_dates(viz_expiry[0], today=today)
        if dates:
            b.present("expiry_date", dates[0].isoformat(), viz_expiry[1] * _HEURISTIC)


def _filler_rich(line: OcrLine) -> bool:
    """A box of zone text: a long one with fillers, or a run of fillers OCR split off a line."""
    fillers = line.text.count("<")
    return fillers >= 2 and (len(line.text) >= 15 or 2 * fillers >= len(line.text))


def zone_boxes_of(lines: Sequence[OcrLine]) -> list[OcrLine]:
    """The boxes of the machine-readable zone: the filler-rich ones and every box within their band (a
    fragment of a zone line whose fillers were split off or misread). Only the other boxes are the printed
    zone, so the zone's own name line can never confirm itself."""
    seeds = [x for x in lines if _filler_rich(x)]
    if not seeds:
        return []
    margin = max(x.height for x in seeds)
    top, bottom = min(x.top for x in seeds), max(x.bottom for x in seeds)
    left, right = min(x.left for x in seeds) - margin, max(x.right for x in seeds) + margin
    return [x for x in lines if top <= x.middle <= bottom and left <= x.left and x.right <= right]


def _printed_extension(zone_name: str, printed_name: str) -> str | None:
    """The printed name when it is the zone's name continued: the zone's words first, in order (a word may
    have lost one letter in the zone, e.g. a stroke missing in print), then more words (a patronymic, given
    names the zone had no room for). The printed zone carries the full name in the issuer's spelling; the
    zone only a transliteration that may stop short. None when the printed name is anything else."""
    zone_words, printed_words = _fold(zone_name).split(), _fold(printed_name).split()
    if len(printed_words) <= len(zone_words) or not looks_like_name(printed_name):
        return None
    if all(z == p or _one_letter_lost(z, p) for z, p in zip(zone_words, printed_words)):
        return " ".join(printed_name.split())
    return None


def _printed_beyond(zone_name: str, printed_boxes: Sequence[OcrLine]) -> bool:
    """A printed box that begins with the zone name's last words and goes on with new name words ("MARIA MIA"
    beside a zone read as MARTIN<<MARIA): the zone's name is incomplete (OCR lost part of its line), so its
    words all being printed confirms nothing. A box that goes on to repeat a zone word is another form of the
    whole name ("ANDRIS JANIS PARAUDZINS", Latvia's historical form, beside PARAUDZINS<<ANDRIS), not this."""
    zone = _fold(zone_name).split()
    for box in printed_boxes:
        # only a printed name: capitals and nothing else (not a signature, "Isolde Hustefre"; not an address or
        # a code, "00000 SPECIMEN (SPE)")
        if not looks_like_name(box.text) or box.text != box.text.upper():
            continue
        words = _fold(box.text).split()
        for k in range(1, len(zone) + 1):
            rest = words[k:]
            if words[:k] == zone[-k:] and rest and len(rest[0]) >= 2 and _label_kind(rest[0]) is None \
                    and not set(rest) & set(zone):
                return True
    return False


def _one_letter_lost(short: str, long: str) -> bool:
    return len(long) == len(short) + 1 >= 3 and any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _as_printed(name: str, printed_words: set[str], misread: bool) -> str:
    """Undo zone misreads that only the page can settle, word by word, where the page shows the words: a
    lone '<' between two names read as K glues them ("ANNAKMARIA": split at that K when both halves are
    printed); the filler after a name read as K lengthens it ("JOHNK": cut when "JOHN" is printed and
    "JOHNK" is not; ERIK stays ERIK); a closing filler run read as A's swallows a final A ("MARIA<<<" read
    "MARIAAAA" and stripped to "MARI": restored when "MARIA" is printed). On a name line known to be misread
    (`misread`: letters among its closing fillers), trailing one- or two-letter words the page does not print
    are filler debris ("LUCAS<A<<<<A" read from "LUCAS<<<<<<<") when every other word is printed."""
    words = name.split()
    if misread:
        while len(words) > 1 and len(words[-1]) <= 2 and words[-1] not in printed_words and \
                set(words[:-1]) <= printed_words:
            words.pop()
    out = []
    for n, word in enumerate(words):
        if word not in printed_words:
            for i, c in enumerate(word):
                if c == "K" and word[:i] in printed_words and word[i + 1:] in printed_words:
                    word = f"{word[:i]} {word[i + 1:]}"
                    break
            else:
                if word.endswith("K") and word[:-1] in printed_words:
                    word = word[:-1]
                elif n == len(words) - 1 and word + "A" in printed_words:
                    word += "A"
        out.append(word)
    return " ".join(out)


def _expiry_factor(zone: Zone) -> float:
    """ICAO zones give the expiry its own check digit; a licence zone protects it by the composite only."""
    check = "mrz.expiry" if isinstance(zone, mrz.MrzResult) else "mrz.composite"
    return _check_factor(zone, check)


def _read_french_expiry(lines: Sequence[OcrLine], today: date, b: _Builder) -> None:
    """The CNI's zone has no expiry: the back's "valable jusqu'au" date, else absent (front only) or
    unreadable (back shown, date not legible). Never derived from the issue month."""
    texts = [x.text for x in lines]
    found = french_id.printed_expiry(texts, today)
    if found is not None:
        b.present("expiry_date", found[1].isoformat(), lines[found[0]].score)
    elif french_id.shows_back(texts):
        b.unreadable("expiry_date")
    else:
        b.absent("expiry_date")


def _check_factor(zone: Zone, check: str) -> float:
    return _CHECK_FAILED if check in zone.checks_failed else 1.0


def _line_score(lines: Sequence[OcrLine], needle: str) -> float:
    """OCR score of the box holding `needle` (mean score if none does, e.g. when joined across boxes)."""
    flat = re.sub(r"\s+", "", needle)
    for x in lines:
        if flat and flat in re.sub(r"\s+", "", x.text):
            return x.score
    return mean(x.score for x in lines)


_FRONT_MARKERS = ("姓名", "性别", "民族", "出生", "住址", "公民身份号码")
_BACK_MARKERS = ("签发机关", "有效期限", "居民身份证", "中华人民共和国")


def _read_cn(texts: list[str], lines: Sequence[OcrLine], today: date, b: _Builder) -> bool:
    """Fill from a PRC ID page (front, back or both); False when the page is not one."""
    flat = re.sub(r"\s+", "", "".join(texts))
    front = cn_id.parse_front(texts, today=today)
    back = cn_id.parse_back(texts)
    has_back = back.found or any(m in flat for m in _BACK_MARKERS)
    # Both sides photographed small: the portrait side's labels may be lost and its number fail the checksum,
    # yet an 18-character number beside the emblem side shows it is there (its fields unreadable, not absent).
    has_front = front.number is not None or any(m in flat for m in _FRONT_MARKERS) or \
        (has_back and any(cn_id.shows_a_number(t) for t in texts))
    if not (has_front or has_back):
        return False
    if has_front:
        b.checks += front.checks
        b.failures += front.check_failures
        penalty = _CROSS_DISAGREES if front.check_failures else 1.0
        if front.name:
            b.present("name", front.name, _line_score(lines, front.name) * penalty)
        if front.number:
            b.present("id_number", front.number, _line_score(lines, front.number) * penalty)
    else:
        b.absent("name")
        b.absent("id_number")
    if has_back:
        if back.valid_until is not None:
            b.checks.append("cn_id.validity_range")
            until = back.valid_until if isinstance(back.valid_until, str) else back.valid_until.isoformat()
            score = _line_score(lines, until.replace("-", ".")) if until != "long-term" else _line_score(lines, "长期")
            b.present("expiry_date", until, score)
    else:
        b.absent("expiry_date")
    return True


def _read_permanent_residence(texts: list[str], lines: Sequence[OcrLine], today: date, b: _Builder) -> None:
    """Fill from a Foreign Permanent Resident ID Card: checksum-valid number, labelled name, validity end."""
    card = cn_permanent_residence.read_card(texts, today=today)
    b.checks += card.checks
    b.failures += card.check_failures
    if card.number is not None:
        penalty = _CROSS_DISAGREES if card.check_failures else 1.0
        b.present("id_number", card.number, _line_score(lines, card.number) * penalty)
    if card.name is not None:
        b.present("name", card.name, _line_score(lines, card.name.split()[0]) * _UNCHECKED_NAME)
    if card.valid_until is not None:
        until = card.valid_until if isinstance(card.valid_until, str) else card.valid_until.isoformat()
        b.present("expiry_date", until, _line_score(lines, until.replace("-", ".")))


def _doc_type_from_words(texts: list[str]) -> DocumentType:
    words = _fold(" ".join(texts))
    if re.search(r"\bPAS+(PORT|APORTE|EPORT)\b", words):
        return "passport"
    if re.search(r"\bIDENTI(TY|TE|DAD)\b|\bID CARD\b", words):
        return "id_card"
    return "unknown"


def _add_licence_fields(lines: Sequence[OcrLine], printed: _Printed, today: date) -> None:
    """A licence's printed fields are numbered (1. surname, 2. given names, 4b. expiry, 5. number), not
    labelled: add them to the printed values where no label gave one."""
    numbered = driving_licence.read_printed([x.text for x in lines], today)
    for kind, found in (("surname", numbered.surname), ("given", numbered.given_names), ("number", numbered.number)):
        if found is not None:
            printed.values.setdefault(kind, (found[0], lines[found[1]].score))
    if numbered.expiry is not None:
        printed.values.setdefault("expiry", (numbered.expiry[0].strftime("%d.%m.%Y"), lines[numbered.expiry[1]].score))


def read_document(lines: Sequence[OcrLine], today: date) -> DocumentReading:
    """Read one page's OCR lines into document type, fields, per-field states and checks.

    MRZ first (check digits; the printed zone is only cross-checked), then PRC ID sides, then the printed
    zone of other documents by labels (low confidence, no check digits).
    """
    rows = _rows(lines)
    ordered = [x for row in rows for x in row]
    texts = [x.text for x in ordered]
    b = _Builder()
    printed = _read_printed(ordered)

    zone = _find_zone([" ".join(x.text for x in row) for row in rows], today)
    if zone is not None:
        if zone.doc_type == "driving_licence":
            _add_licence_fields(ordered, printed, today)
        _read_zone(zone, ordered, printed, today, b)
        return b.finish(zone.doc_type)
    if cn_permanent_residence.is_card(texts):  # before 居民身份证: its title also says 中华人民共和国
        _read_permanent_residence(texts, ordered, today, b)
        return b.finish("cn_permanent_residence")
    if _read_cn(texts, ordered, today, b):
        return b.finish("cn_id")

    name = _printed_name(printed)
    if name is not None:
        b.present("name", " ".join(name[0].split()), name[1] * _HEURISTIC)
    number = printed.values.get("number") or _unlabelled_number(ordered, printed)
    if number is not None:
        b.present("id_number", re.sub(r"\s+", "", number[0]), number[1] * _HEURISTIC)
    expiry_label = printed.values.get("expiry")
    expiry_dates = parse_printed_dates(expiry_label[0], today=today) if expiry_label else []
    expiry = (expiry_dates[0].isoformat(), expiry_label[1]) if expiry_dates and expiry_label else _latest_date(ordered, today)
    if expiry is not None:
        b.present("expiry_date", expiry[0], expiry[1] * _HEURISTIC)
    return b.finish(_doc_type_from_words(texts))
