"""PRC resident identity card (居民身份证): number checks (GB 11643, ISO 7064 MOD 11-2) and reading the
portrait side (人像面: 姓名 性别 民族 出生 住址 公民身份号码) and emblem side (国徽面: 签发机关 有效期限)
from OCR lines.


The number is self-checking (checksum, embedded birth date, sex parity), so OCR repairs to it are accepted
only when the checksum passes; the printed 出生 and 性别 are then cross-checked against it.

As a registered format (`FORMAT`): the portrait side gives the name and the number, the emblem side the validity
("long-term" for 长期), read from whichever the page shows. Its sides carry no MRZ, so no MRZ re-read is tried.
An 18-character number of the resident-ID shape is checked whatever document it is claimed to be on: that check
(`cn_permanent_residence.STRAY_CHECK`) lives with the permanent resident card, whose 2023 number shares the shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from typing import Literal, Sequence

from pipeline.formats.dates import make_date, normalise_text, parse_cjk_date, parse_validity
from pipeline.formats.document_format import SHAKEN_CLASS, SHARP_CHECK, FormatDefaults, NumberCheck
from pipeline.formats.lines import line_score, value_score
from pipeline.formats.names import simplified
from pipeline.formats.reading import CROSS_DISAGREES, Builder, DocumentType, Page

_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CHECK_CHARS = "10X98765432"
# First two digits: provinces, plus 71 Taiwan, 81/82 Hong Kong/Macau and 83 (residence permits for
# Taiwan residents). Region codes below province level change over time and are not checked here.
PROVINCES = frozenset({11, 12, 13, 14, 15, 21, 22, 23, 31, 32, 33, 34, 35, 36, 37, 41, 42, 43, 44, 45, 46,
                        50, 51, 52, 53, 54, 61, 62, 63, 64, 65, 71, 81, 82, 83})
_OCR_TO_DIGIT = str.maketrans({"O": "0", "o": "0", "D": "0", "I": "1", "l": "1", "|": "1", "x": "X",
                               "×": "X", "B": "8", "S": "5", "Z": "2"})

Sex = Literal["男", "女"]


def check_char(first17: str) -> str:
    """The 18th character for 17 digits: ISO 7064 MOD 11-2, "10X98765432"[sum(d*w) % 11]."""
    if len(first17) != 17 or not first17.isdigit():
        raise ValueError(f"need 17 digits, got {first17!r}")
    return _CHECK_CHARS[sum(int(d) * w for d, w in zip(first17, _WEIGHTS)) % 11]


def upgrade_15(number: str) -> str | None:
    """First-generation 15-digit number -> 18 digits (century 19 inserted, check character appended);
    None if it is not 15 digits with a real birth date."""
    if len(number) != 15 or not number.isdigit():
        return None
    first17 = number[:6] + "19" + number[6:]
    if make_date(int(first17[6:10]), int(first17[10:12]), int(first17[12:14])) is None:
        return None
    return first17 + check_char(first17)


def birth_date(number: str) -> date | None:
    """The birth date embedded in an 18- or 15-digit number (None if it is not a real date)."""
    s = number.upper()
    if len(s) == 15 and s.isdigit():
        s = upgrade_15(s) or ""
    if len(s) != 18 or not s[:17].isdigit():
        return None
    return make_date(int(s[6:10]), int(s[10:12]), int(s[12:14]))


def sex(number: str) -> Sex | None:
    """男 for an odd sequence digit (17th of 18, 15th of 15), 女 for even."""
    digit = number[16] if len(number) == 18 else number[14] if len(number) == 15 else ""
    return ("男" if int(digit) % 2 else "女") if digit.isdigit() else None


def is_valid_number(s: str, *, today: date | None = None) -> bool:
    """An 18-character number (or 15-digit first-generation one) with a known province, a real birth date
    not after `today` (default: the current date) and, for 18 characters, a correct check character.

    Below-province region codes are not validated: code tables change over the years and libraries
    disagree on them (a code retired later is still valid on older cards)."""
    number = s.upper()
    if len(number) == 15:
        upgraded = upgrade_15(number)
        return upgraded is not None and is_valid_number(upgraded, today=today)
    if len(number) != 18 or not number[:17].isdigit() or number[17] not in "0123456789X":
        return False
    born = birth_date(number)
    return (int(number[:2]) in PROVINCES and born is not None and born <= (today or date.today())
            and check_char(number[:17]) == number[17])


_CANDIDATE = re.compile(r"[0-9OoDIl|BSZ]{17}[0-9Xx×]")


def shows_a_number(text: str) -> bool:
    """Whether `text` holds something shaped like an 18-character number, valid or not: the portrait side is
    on the page even when its labels were lost and its number fails the checksum (its fields are then
    unreadable, not absent)."""
    return _CANDIDATE.search(normalise_text(text)) is not None


def normalise_number(text: str, *, today: date | None = None) -> str | None:
    """The valid 18-character number in an OCR string, repairing O/D->0, I/l->1, x->X and spacing; None
    unless a candidate passes `is_valid_number` (the checksum makes a wrong repair very unlikely)."""
    flat = normalise_text(text)
    for start in range(len(flat) - 17):
        window = flat[start:start + 18]
        if _CANDIDATE.fullmatch(window):
            candidate = window.translate(_OCR_TO_DIGIT)
            if is_valid_number(candidate, today=today):
                return candidate
    return None


# -------------------------------------------------------------------------------------- card sides

_NAME_LABEL = re.compile(r"^姓\s*名\s*[:：]?\s*")
_MISREAD_LABEL = r"(?:姓[\u4e00-\u9fff]|[\u4e00-\u9fff]名)"  # 姓名 with one character misread
_NAME_LABEL_MISREAD = re.compile(rf"^{_MISREAD_LABEL}\s+(\S+)$")
_MISREAD_LABEL_ALONE = re.compile(rf"^{_MISREAD_LABEL}$")
_MISREAD_LABEL_GLUED = re.compile(rf"^{_MISREAD_LABEL}(.{{2,}})$")  # a name has 2+ characters
_LABEL_TAIL = re.compile(r"^(?:姓\s*)?名\s*[:：]?\s*(?=\S{2})")
_LEADING_SYMBOLS = re.compile(r"^[^\w·•]+")  # a separator or speck read as a symbol ("姓名☑张三"): never a name
_SEX_VALUE = re.compile(r"性\s*别\s*[:：]?\s*([男女])")
_LABEL_ONLY = re.compile(r"^(姓名|性别|民族|出生|住址|公民身份号码|签发机关|有效期限)$")
_AUTHORITY_LABEL = re.compile(r"签\s*发\s*机\s*关\s*[:：]?\s*")
_CJK_NAME = re.compile(r"^[\u4e00-\u9fff·•]{1,15}$")


@dataclass(slots=True)
class CnFront:
    """Portrait side as read; `checks`/`check_failures` hold the number and cross-checks."""

    name: str | None = None
    sex: Sex | None = None
    birth_date: date | None = None
    number: str | None = None
    checks: list[str] = field(default_factory=list)
    check_failures: list[str] = field(default_factory=list)


@dataclass(slots=True)
class CnBack:
    """Emblem side as read: validity start/end ("long-term" for 长期) and issuing authority."""

    valid_from: date | None = None
    valid_until: date | Literal["long-term"] | None = None
    authority: str | None = None

    @property
    def found(self) -> bool:
        return self.valid_until is not None or self.authority is not None


def _name(lines: Sequence[str]) -> str | None:
    """姓名 value: glued to the label ("姓名张三") or on the next line when the label stands alone; else, from
    a label with one character misread ("姓者", blur), only where the label's end is certain: a space before
    the value in the same box ("姓者 杨洋"), the label alone in its box with the value's box between it and
    the 性别 line ("姓者" / "胡玉俊" / "性别男"), or the label and a value of at least two characters in the box
    right above the 性别 line ("姓者罗英" / "性别"): the label is two characters, and a Chinese name never
    one, so a label that lost a character ("姓罗英") leaves one, which is no name."""
    exact = _labelled_name(lines)
    if exact is not None:
        return exact
    flat = [normalise_text(x) for x in lines]

    def above_sex(value: str, after: int) -> str | None:
        """`value` when it is a name (not a label) and line `after` is the 性别 line."""
        sex_line = after < len(flat) and flat[after].startswith("性别")
        return value if sex_line and _CJK_NAME.fullmatch(value) and not _LABEL_ONLY.match(value) else None

    for i, line in enumerate(lines):
        m = _NAME_LABEL_MISREAD.match(line.strip())  # before normalising, which drops the space
        if m and _CJK_NAME.fullmatch(value := normalise_text(m.group(1))):
            return value
        if _MISREAD_LABEL_ALONE.match(flat[i]):
            found = above_sex(flat[i + 1], i + 2) if i + 1 < len(flat) else None
        elif glued := _MISREAD_LABEL_GLUED.match(flat[i]):
            found = above_sex(glued.group(1), i + 1)
        else:
            found = None
        if found is not None:
            return found
    return None


def _labelled_name(lines: Sequence[str]) -> str | None:
    for i, line in enumerate(lines):
        flat = normalise_text(line)
        m = _NAME_LABEL.match(flat)
        if not m:
            continue
        value = _LEADING_SYMBOLS.sub("", flat[m.end():])
        if not value and i + 1 < len(lines):
            # The value's box can overlap the label's and repeat its tail ("姓名" / "名胡婷"); no surname is 名.
            value = _LABEL_TAIL.sub("", _LEADING_SYMBOLS.sub("", normalise_text(lines[i + 1])))
        return value if _CJK_NAME.fullmatch(value) else None
    return None


def parse_front(lines: Sequence[str], *, today: date | None = None) -> CnFront:
    """Read the portrait side from OCR lines in reading order, then cross-check the number with the
    printed 出生 and 性别."""
    front = CnFront(name=_name(lines))
    for line in lines:
        flat = normalise_text(line)
        if front.sex is None and (m := _SEX_VALUE.search(flat)):
            front.sex = m.group(1)  # type: ignore[assignment]
        if front.birth_date is None and "年" in flat and "月" in flat:
            front.birth_date = parse_cjk_date(flat)
        if front.number is None:
            front.number = normalise_number(flat, today=today)
    if front.number is not None:
        front.checks.append("cn_id.checksum")
        for check, printed, embedded in (("cn_id.birth_matches_printed", front.birth_date, birth_date(front.number)),
                                         ("cn_id.sex_matches_printed", front.sex, sex(front.number))):
            if printed is not None:
                (front.checks if printed == embedded else front.check_failures).append(check)
    return front


def parse_back(lines: Sequence[str]) -> CnBack:
    """Read the emblem side: the 有效期限 range (also when OCR splits label and dates) and 签发机关."""
    back = CnBack()
    for i, line in enumerate(lines):
        flat = normalise_text(line)
        if back.valid_until is None:
            window = flat + (normalise_text(lines[i + 1]) if i + 1 < len(lines) else "")
            validity = parse_validity(flat) or (parse_validity(window) if "有效期限" in flat else None)
            if validity is not None:
                back.valid_from, back.valid_until = validity
        if back.authority is None and (m := _AUTHORITY_LABEL.search(flat)):
            value = flat[m.end():]
            if not value and i + 1 < len(lines) and not _LABEL_ONLY.match(normalise_text(lines[i + 1])):
                value = normalise_text(lines[i + 1])
            back.authority = value or None
    return back


CHECK = NumberCheck("cn_id.checksum", is_valid_number, "MOD 11-2 check character or embedded birth date is wrong")

# Passed when the 有效期限 end is its start plus a statutory period (5, 10 or 20 years, same month and day, GB
# 11643 / the resident ID card law): a misread digit in either date breaks it, so it is evidence for the expiry.
SPAN_CHECK = "cn_id.validity_span"
STATUTORY_YEARS = (5, 10, 20)
# Passed when the range is a legible start date followed by 长期 (long-term): its own kind of evidence.
LONG_TERM_CHECK = "cn_id.validity_long_term"

_FRONT_MARKERS = ("姓名", "性别", "民族", "出生", "住址", "公民身份号码")
_BACK_MARKERS = ("签发机关", "有效期限", "居民身份证", "中华人民共和国")

# Failed when a label the card prints in fixed words is read with characters wrong ("有数期限", "签发机美"):
# the capture garbles characters (blur, glare), so a name, which no check covers, may be a look-alike of the
# printed one (怡 read 台) at a confident score. Its name then has an evidence class of its own
# (`cn.<checksum verdict>_labels_misread`), which a table that has not measured it caps below the threshold.
LABELS_CHECK = "cn_id.labels_legible"
_LONG_LABELS = ("公民身份号码", "签发机关", "有效期限")
# A two-character label would match ordinary words (住宅 for 住址), so one is taken as misread only before the
# value only it is printed with: 性别 before 男 or 女 ("性制女"), 出生 before a year ("出玍1988年").
_SHORT_LABELS_MISREAD = re.compile(r"^(?!性别)(?:性.|.别)[男女]$|^(?!出生)(?:出.|.生)\d{4}年")


@dataclass(frozen=True, slots=True)
class Sides:
    """What the page shows of the card: each side as parsed, and whether it is there."""

    front: CnFront
    back: CnBack
    has_front: bool
    has_back: bool


class ResidentIdFormat(FormatDefaults):
    name = "cn_id"
    doc_types = ("cn_id",)
    issuer = "CHN"  # 居民身份证: the People's Republic of China issues every one
    may_carry_mrz = False
    number_shape = re.compile(r"\d{17}[\dX]")
    number_checks = {"cn_id": CHECK}
    long_term = {"cn_id": "a PRC resident ID card"}
    refuting_checks = {"cn_id.checksum": "id_number"}
    # no checksum covers the name and the card prints it once: its box's sharpness is part of its evidence
    read_alone = ("name",)
    # the printed 出生 / 性别 disagree with what the number embeds
    disagreements = {"cn_id.birth_matches_printed": "id_number", "cn_id.sex_matches_printed": "id_number"}

    def find(self, page: Page) -> Sides | None:
        """The sides on the page (front, back or both); None when it shows neither."""
        texts = page.texts
        flat = re.sub(r"\s+", "", "".join(texts))
        front = parse_front(texts, today=page.today)
        back = parse_back(texts)
        has_back = back.found or any(m in flat for m in _BACK_MARKERS)
        # Both sides photographed small: the portrait side's labels may be lost and its number fail the
        # checksum, yet an 18-character number beside the emblem side shows it is there (its fields
        # unreadable, not absent).
        has_front = front.number is not None or any(m in flat for m in _FRONT_MARKERS) or \
            (has_back and any(shows_a_number(t) for t in texts))
        return Sides(front, back, has_front, has_back) if has_front or has_back else None

    def read(self, found: Sides, page: Page, b: Builder) -> DocumentType:
        lines, front, back = page.lines, found.front, found.back
        if labels_misread(page.texts):
            b.failures.append(LABELS_CHECK)
        if found.has_front:
            b.checks += front.checks
            b.failures += front.check_failures
            penalty = CROSS_DISAGREES if front.check_failures else 1.0
            # The card prints simplified characters (a traditional one is an OCR reading). No checksum covers the
            # name: its own characters' recognition is its evidence.
            if front.name:
                b.present("name", simplified(front.name), value_score(lines, front.name) * penalty)
            if front.number:
                b.present("id_number", front.number, line_score(lines, front.number) * penalty)
        else:
            b.absent("name")
            b.absent("id_number")
        if found.has_back:
            if back.valid_until is not None:
                b.checks.append("cn_id.validity_range")
                if statutory_span(back.valid_from, back.valid_until):
                    b.checks.append(SPAN_CHECK)
                elif back.valid_until == "long-term" and back.valid_from is not None:
                    b.checks.append(LONG_TERM_CHECK)
                until = back.valid_until if isinstance(back.valid_until, str) else back.valid_until.isoformat()
                score = value_score(lines, until.replace("-", ".")) if until != "long-term" else \
                    line_score(lines, "长期")
                b.present("expiry_date", until, score)
        else:
            b.absent("expiry_date")
        return "cn_id"

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        if doc_type not in self.doc_types:
            return None
        verdict = "passed" if CHECK.name in checks else "failed" if CHECK.name in failures else "none"
        expiry = "cn.validity_span" if SPAN_CHECK in checks else \
            "cn.validity_long_term" if LONG_TERM_CHECK in checks else "cn.validity"
        name = "cn." + verdict + ("_labels_misread" if LABELS_CHECK in failures else "") + \
            (SHAKEN_CLASS if SHARP_CHECK in failures else "")
        return {"name": name, "id_number": "cn." + verdict, "expiry_date": expiry}[field]


def labels_misread(texts: list[str]) -> bool:
    """Whether a box begins with one of the card's long fixed labels read with at least one and at most half of
    its characters wrong, or is 性别 or 出生 with one character wrong before its value (a box that reads the
    label right says nothing either way)."""
    for text in texts:
        flat = re.sub(r"\s+", "", text)
        if _SHORT_LABELS_MISREAD.match(flat):
            return True
        for label in _LONG_LABELS:
            wrong = sum(a != b for a, b in zip(flat[:len(label)], label))
            if len(flat) >= len(label) and 0 < wrong <= len(label) // 2:
                return True
    return False


def statutory_span(start: date | None, end: date | str | None) -> bool:
    """Whether a validity ends a statutory period after it starts (same month and day; 29 February ends on
    28 February). 长期 and a range without a legible start are not spans."""
    if start is None or not isinstance(end, date):
        return False
    for years in STATUTORY_YEARS:
        try:
            expected = start.replace(year=start.year + years)
        except ValueError:
            expected = start.replace(year=start.year + years, day=28)
        if end == expected:
            return True
    return False


FORMAT = ResidentIdFormat()
