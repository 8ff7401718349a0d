"""PRC resident ID card (居民身份证): the portrait side (name, the 公民身份号码 with its MOD 11-2 check
character) and the emblem side (validity, "long-term" for 长期), read from whichever the page shows.

Its sides carry no MRZ, so no MRZ re-read is tried. An 18-character number of the resident-ID shape carries
its check character whatever document it is claimed to be on (`STRAY_CHECK`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from pipeline.fields import cn_id, cn_permanent_residence
from pipeline.fields.formats.registry import FormatDefaults, NumberCheck
from pipeline.fields.lines import line_score, value_score
from pipeline.fields.names import simplified
from pipeline.fields.page import CROSS_DISAGREES, Builder, DocumentType, Page

CHECK = NumberCheck("cn_id.checksum", cn_id.is_valid_number, "MOD 11-2 check character or embedded birth date is wrong")
STRAY_CHECK = NumberCheck(
    "prc_number.checksum", lambda n: cn_id.is_valid_number(n) or cn_permanent_residence.is_valid_number(n),
    "an 18-character PRC-style number whose MOD 11-2 check character or birth date is wrong",
    shape=re.compile(r"\d{17}[\dX]"))

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

    front: cn_id.CnFront
    back: cn_id.CnBack
    has_front: bool
    has_back: bool


class ResidentIdFormat(FormatDefaults):
    name = "cn_id"
    doc_types = ("cn_id",)
    issuer = "CHN"  # 居民身份证: the People's Republic of China issues every one
    may_carry_mrz = False
    number_shape = re.compile(r"\d{17}[\dX]")
    number_checks = {"cn_id": CHECK}
    stray_number_checks = (STRAY_CHECK,)
    long_term = {"cn_id": "a PRC resident ID card"}
    refuting_checks = {"cn_id.checksum": "id_number"}
    # the printed 出生 / 性别 disagree with what the number embeds
    disagreements = {"cn_id.birth_matches_printed": "id_number", "cn_id.sex_matches_printed": "id_number"}

    def find(self, page: Page) -> Sides | None:
        """The sides on the page (front, back or both); None when it shows neither."""
        texts = page.texts
        flat = re.sub(r"\s+", "", "".join(texts))
        front = cn_id.parse_front(texts, today=page.today)
        back = cn_id.parse_back(texts)
        has_back = back.found or any(m in flat for m in _BACK_MARKERS)
        # Both sides photographed small: the portrait side's labels may be lost and its number fail the
        # checksum, yet an 18-character number beside the emblem side shows it is there (its fields
        # unreadable, not absent).
        has_front = front.number is not None or any(m in flat for m in _FRONT_MARKERS) or \
            (has_back and any(cn_id.shows_a_number(t) for t in texts))
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
        name = "cn." + verdict + ("_labels_misread" if LABELS_CHECK in failures else "")
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
