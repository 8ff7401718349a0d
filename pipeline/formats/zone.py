"""Reading a machine-readable zone against the printed zone: the part every zone format shares.

Order of trust: the zone (check digits) beats the printed visual zone, which only cross-checks it. The
cross-checks pass when the zone value is printed elsewhere on the page (name words after transliteration;
number verbatim). They fail only when a labelled printed value exists and differs (label association is
approximate, so absence of evidence is not treated as disagreement), or when the printed name has more letters
than a zone name its fillers close (complete: not a name the field's width cut off, so nothing continues it). A name with no check digit whose
printed reading is a different name is unreadable: neither reading is evidence for itself; so is a field
whose two readings contradict each other with nothing to decide between them, or a name that does not
look like a name.

Each zone format (`ZoneFormat`) turns its decoder's result into `ZoneFields` and says how it differs: which
check protects the expiry, whether a printed expiry cross-checks it, and how fields its zone does not carry
are read from the print.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from datetime import date
from statistics import mean
from typing import Collection, Sequence

from rapidfuzz.distance import Levenshtein

from pipeline.formats.dates import parse_printed_dates, without_month_dates
from pipeline.formats.document_format import FormatDefaults
from pipeline.formats.lines import OcrLine, filler_rich, fold, spellings, zone_boxes_of
from pipeline.formats.mrz import NAME_FILLERS_CHECK, NUMBER_UNCONFIRMED_CHECK, TO_ALPHA, check_blind
from pipeline.formats.names import looks_like_name
from pipeline.formats.printed_zone import NUMBER_VALUE, label_kind, printed_name, unlabelled_number
from pipeline.formats.reading import (
    CHECK_FAILED,
    CROSS_DISAGREES,
    HEURISTIC,
    UNCHECKED_NAME,
    Builder,
    DocumentType,
    Page,
)

# Below this similarity a printed name and a zone name are different names, not one name with a misprint
# or OCR slip (ERIKKSON/ERIKSSON on the ICAO specimen): neither can be trusted over the other.
_SAME_NAME_RATIO = 0.8
# Passed (in `checks`) when the name is the printed one because it continues the zone's (`_printed_extension`).
NAME_EXTENDED_CHECK = "cross.name_printed_extends_mrz"
# Failed (a disagreement) when the name is the zone's respelled as the page prints it (`_respelled_as_printed`).
NAME_RESPELLED_CHECK = "cross.name_respelled_as_printed"
# Passed (in `checks`) when a second reader of another method (`extract.ocr.mrz_glyphs`, a per-cell glyph
# classifier) reads the stored name on the zone's name line (`mrz_glyphs.name_agrees`); failed when it reads another
# name. Asked where the printed zone does not confirm the name, or confirms it at a low recognition score
# (`mrz_glyphs.wanted`): two independent readers agreeing is evidence that does not depend on how the page was
# captured; disagreeing, one of them is wrong and a person decides (`disagreements`).
NAME_TWO_READERS_CHECK = "mrz.name_two_readers"
# The class of a name the two readers read otherwise. It ends in `/disagrees` (`trust.rules.DISAGREES`), so every
# lookup of a confidence by class caps it (`trust.table.Calibration.confidence`), a model answer's floor from the
# embedded reading included, whatever a table fits for it.
TWO_READERS_DISAGREE = "mrz.name_two_readers/disagrees"
# Passed when a zone that carries no expiry date (the French 1988 card's) is read beside a printed expiry that is
# the printed issue date plus the card's validity, issued in the month the zone's number (its check digit passed)
# encodes: a misread digit in either date or the number breaks it, so it vouches for the expiry as a check digit
# would. Its class is `mrz.expiry_printed_span`; a printed expiry without it is `mrz.expiry_none`.
PRINTED_VALIDITY_SPAN_CHECK = "cross.expiry_printed_span"
# A zone name word and a printed word this alike may be one word, one side misread (TAOHAIK / TAOHAN, a blurred
# N read as IK); the recogniser's letter probabilities say which side: unsure of a zone letter (below
# `_UNSURE_LETTER`) and sure of every printed one (at least `_SURE_LETTER`).
_RESPELL_RATIO = 0.75
# An issuer code of a zone: one to three letters once its fillers are dropped (ICAO 9303 codes, `D` for Germany);
# anything else is a misread, not an issuer.
ISSUER_CODE = re.compile(r"[A-Z]{1,3}")


def issuer_code(code: str | None) -> str | None:
    """A zone's issuer code as stored: ISO 3166-1 alpha-3 for a country (Germany's zone code `D` is DEU, as its
    card front says), ICAO's own codes for the others (UNO, XXA, ...); None for what is no code (a misread)."""
    if code is None or not ISSUER_CODE.fullmatch(code):
        return None
    return "DEU" if code == "D" else code
_UNSURE_LETTER = 0.8
_SURE_LETTER = 0.9


@dataclass(frozen=True, slots=True)
class ZoneFields:
    """One decoded zone, whatever its format: values are None where the zone does not carry them.

    `name_debris`: letters among the name's closing fillers (the name line was misread);
    `number_repaired`: the number differs from the zone as read (see `mrz.NUMBER_UNCONFIRMED_CHECK`);
    `surname_prefix`: the zone holds only the surname's first letters and no full name;
    `name_closed`: the zone's name (or surname prefix) ends in fillers before its field does, so it is the whole
    name (surname), not one the field's width cut off: a printed reading with more letters disagrees with it;
    `prints_other_numbers`: the document prints several document numbers (a visa: the visa's and the
    passport's), so a differing labelled number proves nothing against the zone's."""

    doc_type: DocumentType
    name: str | None
    number: str | None
    expiry_date: date | None
    birth_date: date | None
    checks_passed: list[str] = field(default_factory=list)
    checks_failed: list[str] = field(default_factory=list)
    name_debris: bool = False
    number_repaired: bool = False
    surname_prefix: str | None = None
    prints_other_numbers: bool = False
    name_closed: bool = False
    issuer: str | None = None  # the zone's issuing state or organisation (`D` for Germany), None if not letters


class ZoneFormat(FormatDefaults):
    """Base of the formats with a machine-readable zone (`has_zone`): `find_zone` decodes the zone from the
    page's rows; reading, scoring and calibration classes are shared. Hooks: `add_printed` (values the
    layout prints without labels), `number_elsewhere` / `expiry_elsewhere` (when the zone gave none)."""

    name: str
    doc_types: tuple[DocumentType, ...]
    has_zone = True
    expiry_check = "mrz.composite"  # the check digit that protects the zone's expiry date
    expiry_cross_checked = False  # the expiry has no check digit of its own: the printed expiry must agree
    refuting_checks = {"mrz.number": "id_number"}
    # the zone and the printed zone disagree on the field
    disagreements = {"cross.name_mrz_vs_viz": "name", NAME_RESPELLED_CHECK: "name", NAME_TWO_READERS_CHECK: "name",
                     "cross.number_mrz_vs_viz": "id_number", "cross.expiry_mrz_vs_viz": "expiry_date"}

    def find_zone(self, rows: list[str], today: date, printed: Collection[str] = ()) -> ZoneFields | None:
        """The zone among `rows` (text lines in reading order). `printed`: words printed elsewhere on the page
        that may confirm a repaired zone value (a VLM answer's number), looked up but never assembled into
        zone lines."""
        raise NotImplementedError

    def find(self, page: Page) -> ZoneFields | None:
        return self.find_zone(page.rows, page.today)

    def zone_score(self, found: ZoneFields) -> float:
        return len(found.checks_passed) - 0.5 * len(found.checks_failed)

    def read(self, found: ZoneFields, page: Page, b: Builder) -> DocumentType:
        self.add_printed(page)
        read_zone(self, found, page, b)
        b.issuer = issuer_code(found.issuer)
        return found.doc_type

    def add_printed(self, page: Page) -> None:
        return None

    def number_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        return None

    def expiry_elsewhere(self, zone: ZoneFields, page: Page, b: Builder) -> None:
        return None

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        return zone_evidence(field, checks, failures)


def zone_evidence(field: str, checks: list[str], failures: list[str]) -> str | None:
    """The calibration class of a field read from a zone (any `mrz.*` check passed or failed), else None.

    A name a second reader of the zone reads alike is `mrz.name_two_readers`, one it reads otherwise
    `TWO_READERS_DISAGREE` (a disagreement: capped, never auto-accepted), whether or not the printed zone confirms
    it; a name the second reader was not asked about keeps the class its printed confirmation gives. A number
    whose check digit passed is `mrz.number_passed_confirmed` when the printed zone shows the same number (read
    apart from the zone, in another place and print: a misread that happens to pass the digit is not repeated
    there), else `mrz.number_passed`, where such misreads, and a low recognition score, still count."""
    def verdict(check: str) -> str:
        return "passed" if check in checks else "failed" if check in failures else "none"

    if not any(c.startswith("mrz.") for c in checks + failures):
        return None
    name_source = "mrz.name_debris" if NAME_FILLERS_CHECK in failures else \
        "mrz.name_respelled" if NAME_RESPELLED_CHECK in failures else \
        "mrz.name_printed_longer" if NAME_EXTENDED_CHECK in checks else \
        "mrz.name_two_readers" if NAME_TWO_READERS_CHECK in checks else \
        TWO_READERS_DISAGREE if NAME_TWO_READERS_CHECK in failures else \
        "mrz.name_vs_printed_passed" if "cross.name_mrz_vs_viz" in checks else \
        "mrz.name_vs_printed_" + verdict("cross.name_mrz_vs_viz")
    number_source = "mrz.number_unconfirmed" if NUMBER_UNCONFIRMED_CHECK in failures else \
        "mrz.number_passed_confirmed" if "mrz.number" in checks and "cross.number_mrz_vs_viz" in checks else \
        "mrz.number_" + verdict("mrz.number")
    return {"name": name_source,
            "id_number": number_source,
            "expiry_date": "mrz.expiry_printed_span" if PRINTED_VALIDITY_SPAN_CHECK in checks else
            "mrz.expiry_" + verdict("mrz.expiry")}[field]


def read_zone(fmt: ZoneFormat, zone: ZoneFields, page: Page, b: Builder) -> None:
    """Fields from the machine-readable zone, cross-checked against the printed zone (module docstring)."""
    zone_boxes = zone_boxes_of(page.lines)
    seeds = [x for x in zone_boxes if filler_rich(x)]
    evidence = _Evidence(b, mean(x.score for x in seeds) if seeds else mean(x.score for x in page.lines),
                         [x for x in page.lines if x not in zone_boxes], zone_boxes)
    b.checks += zone.checks_passed
    b.failures += zone.checks_failed
    # a check digit proved a character of this zone misread: its name, which no digit covers, is kept only
    # where the page prints it too (validate leaves the refuted field unreadable and keeps the rest)
    misread = any(c in fmt.refuting_checks for c in zone.checks_failed)
    _read_name(zone, page, evidence, misread=misread)
    _read_number(fmt, zone, page, evidence)
    _read_dates(fmt, zone, page, evidence)


@dataclass(slots=True)
class _Evidence:
    """What the zone's fields are weighed with: `base`, the zone's recognition score (its filler-rich boxes,
    else the page's); `printed_boxes`, every box outside the zone (the zone never confirms itself);
    `zone_boxes`, the zone's own."""

    b: Builder
    base: float
    printed_boxes: list[OcrLine]
    zone_boxes: list[OcrLine]

    def cross(self, check: str, agrees: bool, disagrees: bool) -> float:
        """Record a cross-check; the factor it puts on the field's confidence."""
        if agrees:
            self.b.checks.append(check)
            return 1.0
        if disagrees:
            self.b.failures.append(check)
            return CROSS_DISAGREES
        return 1.0


def _read_name(zone: ZoneFields, page: Page, ev: _Evidence, *, misread: bool) -> None:
    b, base = ev.b, ev.base
    viz_name = printed_name(page.printed)
    if zone.name and not looks_like_name(zone.name):  # zone debris (digits): as if the name line was lost
        b.failures.append("name.shape")
    if zone.name_debris:
        b.failures.append(NAME_FILLERS_CHECK)
    if zone.name and looks_like_name(zone.name):
        words = _printed_name_words(ev.printed_boxes)
        name = _as_printed(zone.name, words, zone.name_debris)
        fuller = _printed_extension(name, viz_name[0]) if viz_name is not None else None
        agrees = set(name.split()) <= words
        disagrees = viz_name is not None and fold(name) not in spellings(viz_name[0])
        if fuller is not None and zone.name_closed:
            # the zone's name is complete (fillers close it): a printed name with more letters is not its
            # continuation but a disagreement. The printed reading is kept for the person who decides (a
            # patronymic the issuer left out of the zone; or a mark after the surname read as a letter).
            b.failures.append("cross.name_mrz_vs_viz")
            b.present("name", fuller, min(base, viz_name[1]) * CROSS_DISAGREES)
        elif fuller is not None:  # the printed full name (patronymic, more given names) continues the zone's
            b.checks.append(NAME_EXTENDED_CHECK)
            b.present("name", fuller, min(base, viz_name[1]))
        elif _printed_beyond(name, ev.printed_boxes):  # its words are printed, but the print goes on: incomplete
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
        elif zone.name_debris and _unprinted_tail(name, words):
            # a line known to be misread (letters among its closing fillers) whose last words the page does not
            # print, while it prints the others: fillers read as letters ("HUGO<M<AAAMMA"), or a name the page
            # cut short; nothing says which
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
        elif not agrees and disagrees and \
                max(difflib.SequenceMatcher(None, v, fold(name)).ratio() for v in spellings(viz_name[0])) \
                < _SAME_NAME_RATIO:
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
        elif misread and not agrees:  # a zone proven misread, its name printed nowhere else on the page
            b.unreadable("name")
        elif not agrees and (respelled := _respelled_as_printed(name, words, ev.zone_boxes, ev.printed_boxes)):
            # the zone line misread letters the page prints surely: the printed spelling is the better reading,
            # and a disagreement all the same (`disagreements`), so a person confirms it
            b.failures.append(NAME_RESPELLED_CHECK)
            b.present("name", respelled, base * UNCHECKED_NAME)
        else:
            factor = ev.cross("cross.name_mrz_vs_viz", agrees, disagrees)
            b.present("name", name, base * factor * (1.0 if agrees else UNCHECKED_NAME))
    elif viz_name is not None and zone.surname_prefix:  # the zone holds the surname's first letters only
        if _prefix_agrees(zone, page):
            b.checks.append("cross.name_mrz_vs_viz")
            b.present("name", " ".join(viz_name[0].split()), viz_name[1] * UNCHECKED_NAME)
        else:
            b.failures.append("cross.name_mrz_vs_viz")
            b.unreadable("name")
    elif viz_name is not None:  # name line lost or not decoded: the printed name is the only source
        b.present("name", " ".join(viz_name[0].split()), viz_name[1] * HEURISTIC)


def _prefix_agrees(zone: ZoneFields, page: Page) -> bool:
    """Whether the printed name begins with the zone's surname prefix; a closed prefix (fillers after it) is
    the whole surname, so the printed surname must be exactly it: a letter more ("MUSTERI" beside MUSTER<<, a
    mark after the surname read as a letter) is another surname."""
    prefix = (zone.surname_prefix or "").replace(" ", "")
    viz_name = printed_name(page.printed)
    if viz_name is None or not any(v.replace(" ", "").startswith(prefix) for v in spellings(viz_name[0])):
        return False
    if not zone.name_closed:
        return True
    surname = page.printed.values.get("surname")
    return surname is not None and prefix in {v.replace(" ", "") for v in spellings(surname[0])}


# Separators a page prints inside a number ("000-5903358-01", "12 345.678"); its zone holds the characters alone.
_NUMBER_SEPARATORS = re.compile(r"[\s\-./–—]+")


def bare_number(text: str) -> str:
    """A printed number as a zone holds it: upper case, without spaces and separators."""
    return _NUMBER_SEPARATORS.sub("", text.upper())


def _read_number(fmt: ZoneFormat, zone: ZoneFields, page: Page, ev: _Evidence) -> None:
    b, printed = ev.b, page.printed
    if not zone.number:
        return fmt.number_elsewhere(zone, page, b)
    viz_number = printed.values.get("number")
    flat = {bare_number(x.text) for x in ev.printed_boxes}
    agrees = any(zone.number in t for t in flat)
    viz = bare_number(viz_number[0]) if viz_number is not None else ""
    # a labelled value without a number's shape (`NUMBER_VALUE`: a label's words taken for it, "Type/Code of issuing
    # State") names no number, so it cannot contradict the zone's
    disagrees = not zone.prints_other_numbers and NUMBER_VALUE.fullmatch(viz) is not None and viz != zone.number
    factor = ev.cross("cross.number_mrz_vs_viz", agrees, disagrees)
    if zone.number_repaired and not agrees:
        b.failures.append(NUMBER_UNCONFIRMED_CHECK)
    unlabelled = unlabelled_number(ev.printed_boxes, printed)
    prints_another = disagrees or (unlabelled is not None and unlabelled[0] != zone.number)
    if prints_another and not agrees and (zone.number_repaired or "mrz.number" in zone.checks_failed):
        # its own digit does not vouch for it (failed, or chose the repair) and the page prints another number
        # (labelled, or the one number-shaped box on it)
        b.unreadable("id_number")
    elif not agrees and _printed_with_a_blind_twin(zone.number, flat):
        # the page prints the number with a character its check digit cannot tell apart (M for W): the digit
        # passes for either, so nothing says which of the two readings is the number
        b.failures.append("cross.number_mrz_vs_viz")
        b.unreadable("id_number")
    else:
        b.present("id_number", zone.number, ev.base * factor * _check_factor(zone, "mrz.number"))


def _read_dates(fmt: ZoneFormat, zone: ZoneFields, page: Page, ev: _Evidence) -> None:
    b, today = ev.b, page.today
    born = zone.birth_date
    if born is not None and any(born in parse_printed_dates(x.text, today=today) for x in ev.printed_boxes):
        b.checks.append("cross.birth_mrz_vs_viz")  # positive evidence only: a page prints several dates
    if zone.expiry_date is None:
        return fmt.expiry_elsewhere(zone, page, b)
    factor = _check_factor(zone, fmt.expiry_check)
    viz_expiry = page.printed.values.get("expiry")
    if fmt.expiry_cross_checked and viz_expiry is not None:
        agrees = zone.expiry_date in parse_printed_dates(viz_expiry[0], today=today)
        factor *= ev.cross("cross.expiry_mrz_vs_viz", agrees, not agrees)
    b.present("expiry_date", zone.expiry_date.isoformat(), ev.base * factor)


def _printed_with_a_blind_twin(number: str, printed: set[str]) -> bool:
    """A printed box that is the zone's number but for at most two characters, one of them a character the
    check digit cannot tell from the zone's (`mrz.check_blind`: M and W)."""
    for text in printed:
        if len(text) != len(number):
            continue
        differ = [(a, b) for a, b in zip(number, text) if a != b]
        if 0 < len(differ) <= 2 and any(check_blind(a, b) for a, b in differ):
            return True
    return False


def _check_factor(zone: ZoneFields, check: str) -> float:
    return CHECK_FAILED if check in zone.checks_failed else 1.0


def _printed_extension(zone_name: str, printed_name: str) -> str | None:
    """The printed name when it is the zone's name continued: the zone's words first, in order (a word may
    have lost one letter in the zone, e.g. a stroke missing in print), then more words (a patronymic, given
    names the zone had no room for). The printed zone carries the full name in the issuer's spelling; the
    zone only a transliteration that may stop short. None when the printed name is anything else."""
    zone_words = fold(zone_name).split()
    if not looks_like_name(printed_name):
        return None
    for spelled in spellings(printed_name):
        printed_words = spelled.split()
        if len(printed_words) > len(zone_words) and \
                all(z == p or _one_letter_lost(z, p) for z, p in zip(zone_words, printed_words)):
            return " ".join(printed_name.split())
    return None


def _printed_name_words(printed_boxes: Sequence[OcrLine]) -> set[str]:
    """The words printed outside the zone that can confirm a zone name's words: the letters of each token
    without digits, outside dates. A token with digits is a number or a date ("E78176884", "12JAN1990"), whose
    letters are no name: folded, they would leave single letters ("E") that confirm a zone name missing its other
    letters; nor is a date's month word ("22 MAR 2024": `without_month_dates`)."""
    return {w for x in printed_boxes for token in without_month_dates(x.text).split()
            if not any(c.isdigit() for c in token) for spelled in spellings(token) for w in spelled.split()}


def _printed_beyond(zone_name: str, printed_boxes: Sequence[OcrLine]) -> bool:
    """A printed box that begins with the zone name's last words and goes on with new name words ("MARIA MIA"
    beside a zone read as MARTIN<<MARIA): the zone's name is incomplete (OCR lost part of its line), so its
    words all being printed confirms nothing. A box that goes on to repeat a zone word is another form of the
    whole name ("ANDRIS JANIS PARAUDZINS", Latvia's historical form, beside PARAUDZINS<<ANDRIS), not this."""
    zone = fold(zone_name).split()
    for box in printed_boxes:
        # only a printed name: capitals and nothing else (not a signature, "Isolde Hustefre"; not an address or
        # a code, "00000 SPECIMEN (SPE)")
        if not looks_like_name(box.text) or box.text != box.text.upper():
            continue
        for spelled in spellings(box.text):
            words = spelled.split()
            for k in range(1, len(zone) + 1):
                rest = words[k:]
                if words[:k] == zone[-k:] and rest and len(rest[0]) >= 2 and label_kind(rest[0]) is None \
                        and not set(rest) & set(zone):
                    return True
    return False


def _unprinted_tail(name: str, printed_words: set[str]) -> bool:
    """The name's last word(s) are printed nowhere on the page, and all the words before them are."""
    words = name.split()
    kept = len(words)
    while kept and words[kept - 1] not in printed_words:
        kept -= 1
    return 0 < kept < len(words) and set(words[:kept]) <= printed_words


def _respelled_as_printed(name: str, printed_words: set[str], zone_boxes: Sequence[OcrLine],
                          printed_boxes: Sequence[OcrLine]) -> str | None:
    """The zone's name with each word the page does not print (`printed_words`, those that confirm a zone name)
    spelled as the printed word it misreads; None unless every such word has exactly one.

    A printed word (or two adjacent words of one box: a filler between surname parts read as a letter, VANIDER
    for VAN DER) is the zone word misread when the two are alike (`_RESPELL_RATIO`), the recogniser was sure of
    every printed letter (`_SURE_LETTER`), and every place where the spellings differ holds a zone letter it was
    unsure of (`_UNSURE_LETTER`; a letter the print has and the zone lacks, one beside it). Both sure (a misprint
    on one side, ERIKKSON / ERIKSSON) decides nothing; nor does a print that differs where the zone was sure (a
    mark beside the surname read as a letter, a longer name: `_printed_extension` and the closed-name rule settle
    those)."""
    printed = _scored_printed_words(printed_boxes)
    out, changed = [], False
    for word in name.split():
        if word in printed_words:
            out.append(word)
            continue
        letters = _zone_word_letters(word, zone_boxes)
        found = {w for w, sure in printed
                 if sure >= _SURE_LETTER and letters and _misread_of(word, letters, w.replace(" ", ""))}
        if len(found) != 1:
            return None
        out.append(found.pop())
        changed = True
    return " ".join(out) if changed else None


def _misread_of(zone_word: str, letters: Sequence[float], printed: str) -> bool:
    """Whether `printed` may be what the zone word (`letters`: the recogniser's probability of each of its
    letters) misreads: alike, and where the fewest edits turn one into the other, the recogniser was unsure of
    the zone: each run of adjacent zone letters they change or drop holds a letter it was unsure of (a blurred N
    read as IK: the I unsure, the K, a filler's look-alike, read surely), and a letter they insert sits beside
    one."""
    if len(zone_word) < 3 or len(printed) < 3 or \
            difflib.SequenceMatcher(None, zone_word, printed).ratio() < _RESPELL_RATIO:
        return False
    edits = Levenshtein.editops(zone_word, printed)
    runs: list[list[int]] = []
    for i in sorted(op.src_pos for op in edits if op.tag != "insert"):
        if runs and i - runs[-1][-1] == 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    beside = [[k for k in (op.src_pos - 1, op.src_pos) if 0 <= k < len(zone_word)] for op in edits
              if op.tag == "insert"]
    return all(min(letters[k] for k in run) < _UNSURE_LETTER for run in runs + beside)


def _scored_printed_words(printed_boxes: Sequence[OcrLine]) -> list[tuple[str, float]]:
    """The name words printed in capitals outside the zone, and each pair of adjacent ones in a box (joined by a
    space), with the recogniser's least probability among their letters (0 where it gave none)."""
    out: list[tuple[str, float]] = []
    for box in printed_boxes:
        if box.text != box.text.upper() or not looks_like_name(box.text):
            continue
        scored = len(box.char_scores) == len(box.text)
        words = []
        for m in re.finditer(r"[^\W\d_]+", box.text):
            letters = box.char_scores[m.start():m.end()] if scored else ()
            words.append((fold(m.group()), min(letters, default=0.0)))
        out += words
        out += [(f"{a} {b}", min(sa, sb)) for (a, sa), (b, sb) in zip(words, words[1:])]
    return out


def _zone_word_letters(word: str, zone_boxes: Sequence[OcrLine]) -> tuple[float, ...]:
    """The recogniser's probability of each letter of a zone name word, from the zone box that holds it (its
    digits read as the decoder reads them); empty where no box holds it with per-letter probabilities."""
    for box in zone_boxes:
        start = box.text.upper().translate(TO_ALPHA).find(word)
        if start >= 0 and len(box.char_scores) == len(box.text):
            return tuple(box.char_scores[start:start + len(word)])
    return ()


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
