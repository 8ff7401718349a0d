"""A loopback chat-completions endpoint that answers from a generated set's ground truth with stated mistakes.

No GPU runs here, so the VLM path (prompt, parsing, MRZ evidence, log-probabilities, calibration) is exercised
against this server: a `ChatServer` (tests/support/chat_server.py) whose answers are computed per request.

**Which page is asked about.** idflow prepares pages deterministically, so the server prepares every page of the
manifest with the run's settings (`prepare_page(ref, settings.prepare, keep_full=False)`, then the backend's own
`encode_jpeg`) and keys the truth by the sha256 of those JPEG bytes, the bytes a request carries. A request whose
image is not one of them gets a 400 `unknown_image` the test can see.

**What it answers.** The five fields of the extraction prompt (doc_type, name, id_number, expiry_date,
orientation). When the prompt text mentions `"mrz"` (the evidence prompt), also `"mrz"`: the zone's lines (null on
a page without one) and `"printed"`: the name and number as printed. The zone is rebuilt from the truth with the
specimens' own composition (`synth.identities.MRZPerson`: TD3 passports, TD1/TD2 cards, MRV-A visas), so its check
digits are right; what the manifest does not state (birth date, sex, states, a personal number in the optional
data) is drawn from the page's path, the same for every seed. An entry may state them itself (`birth_date`,
`sex`, `nationality`, `issuing_state`, `other_number`, or the `mrz` lines verbatim).

**Mistakes** (`MistakeRates`, each a probability per field where the kind applies; `MistakeRates.uniform(r)` sets
them all). Each (kind, field) pair of a page draws its own uniform number from `Random(f"{seed}:{image}:draw")`,
drawn whether or not the kind applies, so a page's mistakes at a higher rate are a superset of those at a lower
one, and the same (seed, image) always gets the same answer:
- `substitution` (name, id_number): one look-alike character: O/0, I/1, S/5, B/8 and letter pairs (C/G, E/F, M/N,
  U/V, I/L, P/R) in Latin text; digit pairs (0/8, 1/7, 3/8, 5/6, 6/8) in a number that is all digits; for a
  Chinese name a similar-looking character (王/玉, 李/季, ...).
- `day_month_swap` (expiry_date): 2031-04-05 as 2031-05-04; applies when the day is 1-12 and differs from the month.
- `neighbour`: expiry_date given the birth date (or else the issue date) printed on the page; id_number given
  another number printed on the card (the personal number in the zone's optional data).
- `invented` (name, id_number, expiry_date where the truth is null): a plausible value for a field the page does
  not show (a name from the pools, an 18-digit PRC number whose check character is a guess, a date).
- `truncation` (name): the last word dropped or its end cut (Latin), the last character dropped (Chinese).
- `mrz_line` (the zone): one character of one line changed (a look-alike, `<` read as K or C, or another character).
Kinds are applied in that order of replacement first (invented, neighbour, truncation, swap, substitution), each to
the value the previous ones left; one that no longer applies is dropped and not recorded.

**Consistency between the copies, and why.** The fields and `printed` are one reading of the visual zone: a
misread glyph, a truncated name, a neighbouring value or an invented one appear in the field and in its `printed`
copy alike (a model that misreads a glyph misreads it in both places), so agreement between them proves nothing.
The zone is a separate reading with its own errors (`mrz_line`, independent of the field mistakes). So what can
catch a mistake is: the zone's check digits and its name against the fields (every field mistake on an MRZ page's
number or expiry date leaves the zone's correctly checked value disagreeing with it; a `mrz_line` mistake breaks a
check digit or the zone's name agreement), the PRC MOD 11-2 check and the birth date inside a PRC number, the
format rules, and log-probabilities. Nothing catches an invented value on a page without a zone but its
log-probabilities and the knowledge of which fields the page shows.

**Log-probabilities** (`logprobs: true` in the request; `MistakeConfig.logprobs`: "answer", "ignore" (accepted,
none returned) or "refuse" (400, like providers without them)). The content is cut into tokens of 1-4 characters;
`-logprob` of a right token is Exponential(`sure_mean`), or Exponential(`unsure_mean`) for a share
`unsure_share` of them; of a token holding an altered character, Exponential(`altered_mean`) (`LogprobModel`).
The distributions overlap: a mistake is not always low, and a right token sometimes is. `top_logprobs` alternatives
follow, the true characters first for a substituted token.

**The record.** Per image answered: `MistakeServer.records()` (sha256 -> `AnswerRecord` with the page, and the
`Mistake`s (kind, field, truth, given, detail) visible in the answer) and `GET /mistakes` (the same as JSON) for a
server in another process. `plan(sha256)` gives a page's answer without a request.

In-process (tests):

    with MistakeServer(manifest, Settings(), MistakeConfig(rates=MistakeRates.uniform(0.05), seed=1)) as server:
        ...  # server.base_url, server.config.api_key, server.config.model; server.records()

Standalone (bench/); prints `READY <base_url>` once the pages are indexed:

    python -m tests.support.mistake_server --manifest M --error-rate 0.05 --logprobs --seed 1 --port 0
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import random
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pipeline.datamodel import DocumentRef, PreparedImage
from pipeline.extract.model.openai_compat import encode_jpeg
from pipeline.ingest.containers import page_count
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.settings import PrepareSettings, Settings
from synth.identities import (
    CN_GIVEN,
    CN_REGIONS,
    CN_SURNAMES,
    LATIN_GIVEN,
    LATIN_SURNAMES,
    MRZPerson,
    add_years,
    random_date,
)
from synth.sample_set import GROUND_TRUTH
from tests.support.chat_server import ChatCall, ChatServer, HttpError, Reply, ServerConfig, image_sha256

FIELDS = ("name", "id_number", "expiry_date")
KINDS = ("invented", "neighbour", "truncation", "day_month_swap", "substitution", "mrz_line")
KIND_FIELDS: dict[str, tuple[str, ...]] = {
    "invented": FIELDS, "neighbour": ("id_number", "expiry_date"), "truncation": ("name",),
    "day_month_swap": ("expiry_date",), "substitution": ("name", "id_number"), "mrz_line": ("mrz",),
}
PAIRS: tuple[tuple[str, str], ...] = tuple((k, f) for k in KINDS for f in KIND_FIELDS[k])

GLYPHS = {"O": "0", "0": "O", "I": "1", "1": "I", "S": "5", "5": "S", "B": "8", "8": "B"}
LETTERS = {"C": "G", "G": "C", "E": "F", "F": "E", "M": "N", "N": "M", "U": "V", "V": "U", "I": "L", "L": "I",
           "P": "R", "R": "P"}
DIGITS = {"0": "8", "8": "06", "1": "7", "7": "1", "3": "8", "5": "6", "6": "58"}
# Similar-looking characters for the names of the generated pools (synth.identities).
HANZI = {"张": "弦", "李": "季", "王": "玉", "刘": "划", "陈": "阵", "杨": "扬", "赵": "越", "黄": "寅", "周": "用",
         "吴": "昊", "徐": "徒", "孙": "逊", "胡": "湖", "朱": "未", "高": "亮", "林": "材", "何": "可", "郭": "廓",
         "马": "与", "罗": "萝", "伟": "传", "娜": "哪", "芳": "苦", "洋": "详", "静": "净", "磊": "晶", "敏": "繁",
         "婷": "停", "昊": "吴", "丽": "西", "俊": "浚", "琳": "淋", "斌": "赋", "雪": "雷", "峰": "锋", "晓": "烧",
         "明": "朋", "华": "毕", "建": "律", "秀": "季", "英": "莫", "文": "义", "军": "车", "玉": "王", "兰": "三",
         "海": "梅", "涛": "寿", "鹏": "朋", "欣": "炊", "怡": "治", "宇": "字", "涵": "函", "浩": "洁", "思": "恩",
         "佳": "住"}
MRZ_MISREADS = {**GLYPHS, "<": "KC", "2": "Z", "Z": "2", "6": "G", "G": "6", "D": "0", "Q": "O"}
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_CJK = re.compile(r"[\u3400-\u9fff]")


# --------------------------------------------------------------------------------------------------------
# The truth of a page
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PageTruth:
    """What a page shows: the manifest's fields and what the mistakes and the zone need besides."""

    path: str
    page: int
    doc_type: str
    name: str | None
    id_number: str | None
    expiry_date: str | None
    orientation: str
    birth_date: str | None = None  # ISO, when the page shows one
    issue_date: str | None = None
    other_number: str | None = None  # another number printed on the page
    mrz: tuple[str, ...] | None = None

    def value(self, name: str) -> str | None:
        return getattr(self, name)

    def fields(self) -> dict[str, Any]:
        return {"doc_type": self.doc_type, "name": self.name, "id_number": self.id_number,
                "expiry_date": self.expiry_date, "orientation": self.orientation}


def page_truth(entry: dict[str, Any], aspect: float | None = None) -> PageTruth:
    """The truth of a manifest entry; `aspect` (width / height of the upright page) tells a TD1 card (1.59) from a
    TD2 one (1.43) when the path does not."""
    base = PageTruth(path=entry["path"], page=int(entry.get("page") or 0), doc_type=entry.get("doc_type") or "unknown",
                     name=entry.get("name"), id_number=entry.get("id_number"), expiry_date=entry.get("expiry_date"),
                     orientation=entry.get("orientation") or "landscape", birth_date=entry.get("birth_date"),
                     issue_date=entry.get("issue_date"), other_number=entry.get("other_number"),
                     mrz=tuple(entry["mrz"]) if entry.get("mrz") else None)
    if base.doc_type == "cn_id":
        number = base.id_number or ""
        birth = base.birth_date or (_iso_from_digits(number[6:14]) if len(number) == 18 else None)
        return dataclasses.replace(base, birth_date=birth)
    if base.mrz is not None or base.doc_type not in ("passport", "id_card", "visa"):
        return base
    return _with_zone(base, entry, _mrz_format(base, aspect))


def _iso_from_digits(yyyymmdd: str) -> str | None:
    try:
        return dt.date(int(yyyymmdd[:4]), int(yyyymmdd[4:6]), int(yyyymmdd[6:8])).isoformat()
    except ValueError:
        return None


def _mrz_format(truth: PageTruth, aspect: float | None) -> str:
    if truth.doc_type == "passport":
        return "td3"
    if truth.doc_type == "visa":
        return "mrva"
    low = truth.path.lower()
    if "td2" in low or "td1" in low:
        return "td2" if "td2" in low else "td1"
    return "td2" if aspect is not None and aspect < 1.5 else "td1"


def _split_name(name: str) -> tuple[str, str]:
    """'VAN DER BERG JAN PIETER' -> ('VAN DER BERG', 'JAN PIETER'): the longest surname of the pools that starts
    the name, else its first word."""
    words = name.split()
    known = set(LATIN_SURNAMES) | {p for _, p in CN_SURNAMES}
    for n in range(len(words), 0, -1):
        if " ".join(words[:n]) in known:
            return " ".join(words[:n]), " ".join(words[n:])
    return words[0] if words else "", " ".join(words[1:])


def _with_zone(base: PageTruth, entry: dict[str, Any], fmt: str) -> PageTruth:
    if not (base.name and base.id_number and base.expiry_date and _ISO.match(base.expiry_date)):
        return base
    rng = random.Random(f"truth:{base.path}:{base.page}")  # the page's own facts: the same for every seed
    expiry = dt.date.fromisoformat(base.expiry_date)
    years = 1 if base.doc_type == "visa" else 10
    issued = dt.date.fromisoformat(base.issue_date) if base.issue_date else \
        add_years(expiry, -years) + dt.timedelta(days=1)
    birth = dt.date.fromisoformat(base.birth_date) if base.birth_date else \
        random_date(rng, dt.date(1950, 1, 1), min(dt.date(2005, 12, 31), add_years(issued, -16)))
    sex = entry.get("sex") or rng.choice("MF")
    home = "CHN" if re.fullmatch(r"E\d{8}", base.id_number) else "UTO"
    nationality = entry.get("nationality") or home
    state = entry.get("issuing_state") or (("GBR" if nationality != "GBR" else "CAN") if fmt == "mrva" else home)
    other = base.other_number or (rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") + rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ")
                                  + "".join(rng.choice("0123456789") for _ in range(5 if fmt == "td2" else 7)))
    surname, given = _split_name(base.name)
    person = MRZPerson(surname=surname, given_names=given, sex=sex, birth=birth, nationality=nationality,
                       issuing_state=state, doc_number=base.id_number, issued=issued, expiry=expiry, optional=other)
    try:
        lines = {"td3": person.td3, "td1": person.td1, "td2": person.td2, "mrva": person.mrva}[fmt]()
    except ValueError:  # a value the zone cannot hold: the page keeps no zone
        return base
    return dataclasses.replace(base, birth_date=birth.isoformat(), issue_date=issued.isoformat(), other_number=other,
                               mrz=tuple(lines))


# --------------------------------------------------------------------------------------------------------
# Drawing and applying mistakes (pure functions)
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MistakeRates:
    """Probability of each kind per field where it applies (see the module docstring)."""

    substitution: float = 0.0
    day_month_swap: float = 0.0
    neighbour: float = 0.0
    invented: float = 0.0
    truncation: float = 0.0
    mrz_line: float = 0.0

    def __post_init__(self) -> None:
        for kind in KINDS:
            if not 0.0 <= getattr(self, kind) <= 1.0:
                raise ValueError(f"rate {kind}={getattr(self, kind)} outside [0, 1]")

    @classmethod
    def uniform(cls, error_rate: float) -> MistakeRates:
        """Every kind at `error_rate`."""
        return cls(**{kind: error_rate for kind in KINDS})

    def rate(self, kind: str) -> float:
        return float(getattr(self, kind))


@dataclass(frozen=True)
class Mistake:
    """One injected mistake: `field` is name, id_number, expiry_date or mrz; `truth` and `given` the field's value
    before and after it (for mrz: the line)."""

    kind: str
    field: str
    truth: str | None
    given: str | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def applies(kind: str, field_: str, truth: PageTruth, value: str | None) -> bool:
    """Whether `kind` can alter `value` of `field_` on this page."""
    if kind == "mrz_line":
        return truth.mrz is not None
    if kind == "invented":
        return truth.value(field_) is None and value is None
    if value is None:
        return False
    if kind == "substitution":
        return bool(_substitution_sites(value))
    if kind == "day_month_swap":
        return bool(_ISO.match(value)) and int(value[8:10]) <= 12 and value[5:7] != value[8:10]
    if kind == "neighbour":
        return _neighbour(field_, truth, value) is not None
    if kind == "truncation":
        return len(value) >= 2 if _CJK.search(value) else (len(value.split()) >= 2 and len(value.split()[-1]) >= 2)
    raise ValueError(f"unknown mistake kind {kind!r}")


def draw_mistakes(truth: PageTruth, rates: MistakeRates, seed: int, key: str) -> list[tuple[str, str]]:
    """The (kind, field) pairs drawn for a page: one uniform number per pair, whether the kind applies or not."""
    rng = random.Random(f"{seed}:{key}:draw")
    drawn = []
    for kind, field_ in PAIRS:
        u = rng.random()
        value = None if field_ == "mrz" else truth.value(field_)
        if applies(kind, field_, truth, value) and u < rates.rate(kind):
            drawn.append((kind, field_))
    return drawn


@dataclass
class Composition:
    """A page's answer: the fields, the evidence copies, the mistakes in them, and per value which of its
    characters are altered (index -> the true character there, or None)."""

    fields: dict[str, Any]
    mrz: list[str] | None
    printed: dict[str, Any]
    mistakes: list[Mistake]
    altered: dict[str, dict[int, str | None]]  # "name", "id_number", "expiry_date", "mrz0", "mrz1", ...


def compose(truth: PageTruth, drawn: list[tuple[str, str]], seed: int, key: str) -> Composition:
    """Apply the drawn mistakes to the truth (in `KINDS` order, each to what the previous left)."""
    values: dict[str, str | None] = {f: truth.value(f) for f in FIELDS}
    altered: dict[str, dict[int, str | None]] = {f: {} for f in FIELDS}
    mistakes: list[Mistake] = []
    lines = list(truth.mrz) if truth.mrz is not None else None
    for kind, field_ in drawn:
        rng = random.Random(f"{seed}:{key}:{kind}:{field_}")
        if kind == "mrz_line":
            assert lines is not None
            i, pos, new = _misread_line(lines, rng)
            old = lines[i]
            lines[i] = old[:pos] + new + old[pos + 1:]
            altered[f"mrz{i}"] = {pos: old[pos]}
            mistakes.append(Mistake(kind, "mrz", old, lines[i], f"line {i + 1} position {pos + 1}: "
                                                                 f"{old[pos]!r} -> {new!r}"))
            continue
        before = values[field_]
        if not applies(kind, field_, truth, before):
            continue
        after, marks, detail = _apply(kind, field_, truth, before, rng)
        values[field_] = after
        altered[field_] = marks if kind in ("invented", "neighbour") else _shift(altered[field_], before, after) | marks
        mistakes.append(Mistake(kind, field_, before, after, detail))
    fields = {**truth.fields(), **values}
    return Composition(fields=fields, mrz=lines, printed={"name": values["name"], "id_number": values["id_number"]},
                       mistakes=mistakes, altered=altered)


def _shift(marks: dict[int, str | None], before: str | None, after: str | None) -> dict[int, str | None]:
    """Earlier marks that still fall inside the value (a truncation cuts some off)."""
    return {i: c for i, c in marks.items() if after is not None and i < len(after)}


def _apply(kind: str, field_: str, truth: PageTruth, value: str | None,
           rng: random.Random) -> tuple[str, dict[int, str | None], str]:
    if kind == "invented":
        new = _invent(field_, truth, rng)
        return new, dict.fromkeys(range(len(new))), "a value for a field the page does not show"
    assert value is not None
    if kind == "neighbour":
        new, source = _neighbour(field_, truth, value)  # type: ignore[misc]
        return new, dict.fromkeys(range(len(new))), f"the {source}"
    if kind == "substitution":
        pos, new_char = rng.choice(_substitution_sites(value))
        return value[:pos] + new_char + value[pos + 1:], {pos: value[pos]}, f"position {pos + 1}: " \
                                                                           f"{value[pos]!r} -> {new_char!r}"
    if kind == "day_month_swap":
        new = f"{value[:5]}{value[8:10]}-{value[5:7]}"
        return new, {5: value[5], 6: value[6], 8: value[8], 9: value[9]}, "day and month swapped"
    if kind == "truncation":
        if _CJK.search(value):
            new = value[:-1]
        else:
            words = value.split()
            last = words[-1]
            if len(words) >= 3 and rng.random() < 0.5:
                new = " ".join(words[:-1])
            else:
                new = " ".join([*words[:-1], last[:rng.randint(1, len(last) - 1)]])
        return new, {len(new) - 1: None}, f"{len(value) - len(new)} characters cut off the end"
    raise ValueError(f"unknown mistake kind {kind!r}")


def _substitution_sites(value: str) -> list[tuple[int, str]]:
    """(position, replacement) for every look-alike misreading of `value`."""
    numeric = value[:-1].isdigit() and (value[-1].isdigit() or value[-1] == "X") and len(value) >= 6
    sites: list[tuple[int, str]] = []
    for i, ch in enumerate(value):
        options = HANZI.get(ch, "") + GLYPHS.get(ch, "") + ("" if numeric else LETTERS.get(ch, "")) \
            + (DIGITS.get(ch, "") if numeric else "")
        sites.extend((i, o) for o in options)
    return sites


def _neighbour(field_: str, truth: PageTruth, value: str) -> tuple[str, str] | None:
    """The value of a neighbouring field that could be given for `field_`, and what it is."""
    if field_ == "expiry_date" and _ISO.match(value):
        for source, other in (("birth date", truth.birth_date), ("issue date", truth.issue_date)):
            if other and other != value:
                return other, source
    if field_ == "id_number" and truth.other_number and truth.other_number != value:
        return truth.other_number, "other number printed on the card"
    return None


def _invent(field_: str, truth: PageTruth, rng: random.Random) -> str:
    cjk = truth.doc_type == "cn_id"
    if field_ == "name":
        if cjk:
            return rng.choice(CN_SURNAMES)[0] + "".join(rng.choice(CN_GIVEN)[0] for _ in range(rng.choice((1, 2))))
        return f"{rng.choice(LATIN_SURNAMES)} {rng.choice(LATIN_GIVEN)}"
    if field_ == "id_number":
        if cjk:
            birth = random_date(rng, dt.date(1950, 1, 1), dt.date(2004, 12, 31))
            return f"{rng.choice(CN_REGIONS)[0]}{birth:%Y%m%d}{rng.randint(1, 999):03d}{rng.choice('0123456789X')}"
        return "".join(rng.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(2)) + \
            "".join(rng.choice("0123456789") for _ in range(7))
    return random_date(rng, dt.date(2027, 1, 1), dt.date(2045, 12, 31)).isoformat()


def _misread_line(lines: list[str], rng: random.Random) -> tuple[int, int, str]:
    """(line, position, new character) of one misread character in the zone."""
    i = rng.randrange(len(lines))
    pos = rng.randrange(len(lines[i]))
    old = lines[i][pos]
    options = MRZ_MISREADS.get(old) or "".join(c for c in "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c != old)
    return i, pos, rng.choice(options)


# --------------------------------------------------------------------------------------------------------
# The answer text and its log-probabilities
# --------------------------------------------------------------------------------------------------------


def render_answer(comp: Composition, evidence: bool) -> tuple[str, dict[int, str | None]]:
    """The answer's JSON text (json.dumps layout) and its altered characters by offset in the text."""
    obj: dict[str, Any] = dict(comp.fields)
    if evidence:
        obj["mrz"] = comp.mrz
        obj["printed"] = comp.printed
    text, marks = "", {}

    def put(value: Any, mark_key: str | None) -> None:
        nonlocal text
        start = len(text) + 1  # after the opening quote
        text += json.dumps(value, ensure_ascii=False)
        if mark_key and isinstance(value, str) and json.dumps(value, ensure_ascii=False) == f'"{value}"':
            marks.update({start + i: c for i, c in comp.altered.get(mark_key, {}).items() if i < len(value)})

    text += "{"
    for n, (k, v) in enumerate(obj.items()):
        text += (", " if n else "") + json.dumps(k) + ": "
        if k == "mrz" and isinstance(v, list):
            text += "["
            for j, line in enumerate(v):
                text += ", " if j else ""
                put(line, f"mrz{j}")
            text += "]"
        elif k == "printed":
            text += "{"
            for j, (pk, pv) in enumerate(v.items()):
                text += (", " if j else "") + json.dumps(pk) + ": "
                put(pv, pk)
            text += "}"
        else:
            put(v, k if k in FIELDS else None)
    text += "}"
    return text, marks


@dataclass(frozen=True)
class LogprobModel:
    """`-logprob` of a token: Exponential(sure_mean), or Exponential(unsure_mean) for a share unsure_share of the
    right tokens; Exponential(altered_mean) for a token holding an altered character (P(p > 0.9) ~ 8% at 1.2)."""

    sure_mean: float = 0.003
    unsure_share: float = 0.08
    unsure_mean: float = 0.25
    altered_mean: float = 1.2


def token_logprobs(text: str, marks: dict[int, str | None], model: LogprobModel, rng: random.Random,
                   top: int = 0) -> list[dict[str, Any]]:
    """`choices[0].logprobs.content` for `text`: tokens of 1-4 characters that concatenate to it."""
    out, i = [], 0
    while i < len(text):
        n = min(len(text) - i, rng.choice((1, 2, 2, 3, 3, 4)))
        token = text[i:i + n]
        hit = [j for j in range(i, i + n) if j in marks]
        if hit:
            nll = rng.expovariate(1 / model.altered_mean)
        elif rng.random() < model.unsure_share:
            nll = rng.expovariate(1 / model.unsure_mean)
        else:
            nll = rng.expovariate(1 / model.sure_mean)
        lp = -min(nll, 30.0)
        entry: dict[str, Any] = {"token": token, "logprob": lp, "bytes": list(token.encode("utf-8"))}
        entry["top_logprobs"] = _alternatives(token, lp, i, marks, rng, top)
        out.append(entry)
        i += n
    return out


def _alternatives(token: str, lp: float, start: int, marks: dict[int, str | None], rng: random.Random,
                  top: int) -> list[dict[str, Any]]:
    if top <= 0:
        return []
    alts = [(token, lp)]
    rest = max(1e-12, 1 - math.exp(lp))
    true = "".join(marks.get(start + k) or c for k, c in enumerate(token))
    candidates = [true] if true != token else []
    while len(candidates) < top - 1:
        k = rng.randrange(len(token))
        c = token[k]
        new = (GLYPHS.get(c) or LETTERS.get(c) or DIGITS.get(c, "")[:1] or rng.choice("0123456789ABCDEFGH"))
        cand = token[:k] + new + token[k + 1:]
        candidates.append(cand if cand not in candidates and cand != token else cand + rng.choice("<0 "))
    share = 0.7
    for cand in candidates[:top - 1]:
        alts.append((cand, math.log(rest * share)))
        rest *= 1 - share
    return [{"token": t, "logprob": p, "bytes": list(t.encode("utf-8"))} for t, p in alts]


# --------------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------------


@dataclass
class MistakeConfig:
    """The mistakes, their seed, the log-probability behaviour, and the chat server underneath (key, model,
    latency, faults...; its `responder`, `reject_logprobs` and `routes` are set by `MistakeServer`)."""

    rates: MistakeRates = field(default_factory=MistakeRates)
    seed: int = 0
    logprobs: Literal["answer", "ignore", "refuse"] = "answer"
    logprob_model: LogprobModel = field(default_factory=LogprobModel)
    chat: ServerConfig = field(default_factory=ServerConfig)

    def __post_init__(self) -> None:
        if self.logprobs not in ("answer", "ignore", "refuse"):
            raise ValueError(f"logprobs must be answer, ignore or refuse, not {self.logprobs!r}")


@dataclass
class AnswerRecord:
    """What the server answered for one image: the page, whether the evidence prompt asked, the mistakes visible in
    the answer (an `mrz_line` mistake only when the zone was asked for), and how often it was asked."""

    image_sha256: str
    path: str
    page: int
    doc_type: str
    has_mrz: bool
    evidence: bool
    mistakes: list[Mistake]
    requests: int = 1

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in dataclasses.asdict(self).items() if k != "mistakes"},
                "mistakes": [m.as_dict() for m in self.mistakes]}


def manifest_root(manifest: Path) -> Path:
    """Where a manifest's paths are relative to: its folder, or for `<dir>_ground_truth.json` (the sample set's
    truth beside its folder) that folder."""
    if manifest.name.endswith(f"_{GROUND_TRUTH}"):
        return manifest.parent / manifest.name.removesuffix(f"_{GROUND_TRUTH}")
    return manifest.parent


def index_manifest(manifest: Path, prepare: PrepareSettings, root: Path | None = None) -> tuple[
        dict[str, PageTruth], list[str]]:
    """sha256 of the JPEG idflow sends for each manifest page -> its truth; and the pages idflow cannot prepare."""
    root = root or manifest_root(manifest)
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    pages: dict[str, PageTruth] = {}
    unprepared: list[str] = []
    counts: dict[str, tuple[str, int]] = {}
    for entry in entries:
        if "expect_failure" in entry or entry.get("expect_skip") or not entry.get("path"):
            continue
        path = root / entry["path"]
        if entry["path"] not in counts:
            counts[entry["path"]] = (sha256_file(path), page_count(path, prepare))
        sha, n_pages = counts[entry["path"]]
        ref = DocumentRef(path, entry["path"], sha, page=int(entry.get("page") or 0), page_count=n_pages)
        prepared = prepare_page(ref, prepare, keep_full=False)
        if not isinstance(prepared, PreparedImage):
            unprepared.append(f"{entry['path']}:{ref.page}")
            continue
        width, height = prepared.sent_size
        pages[image_sha256(encode_jpeg(prepared.pixels))] = page_truth(entry, width / height)
    return pages, unprepared


class MistakeServer(ChatServer):
    """A `ChatServer` answering each manifest page from its truth with the configured mistakes."""

    def __init__(self, manifest: Path, settings: Settings, config: MistakeConfig | None = None, *,
                 root: Path | None = None, host: str = "127.0.0.1", port: int = 0,
                 index: tuple[dict[str, PageTruth], list[str]] | None = None) -> None:
        """`index`: what `index_manifest(manifest, settings.prepare, root)` returned, to share one between
        servers (preparing every page is the slow part); computed here when None."""
        self.mistakes_config = config or MistakeConfig()
        self.pages, self.unprepared = index or index_manifest(Path(manifest), settings.prepare, root)
        self._records: dict[str, AnswerRecord] = {}
        self._record_lock = threading.Lock()
        chat = dataclasses.replace(self.mistakes_config.chat, responder=self._respond,
                                   reject_logprobs=self.mistakes_config.logprobs == "refuse",
                                   routes={**self.mistakes_config.chat.routes, "/mistakes": self.records_json})
        super().__init__(chat, host=host, port=port)

    def plan(self, image_sha256: str) -> Composition:
        """The answer this server gives for an image (the same on every request)."""
        truth = self.pages[image_sha256]
        cfg = self.mistakes_config
        return compose(truth, draw_mistakes(truth, cfg.rates, cfg.seed, image_sha256), cfg.seed, image_sha256)

    def sha_of(self, path: str, page: int = 0) -> str:
        """The image hash a manifest page is known by."""
        return next(sha for sha, t in self.pages.items() if t.path == path and t.page == page)

    def records(self) -> dict[str, AnswerRecord]:
        """Image sha256 -> what was answered for it (copies)."""
        with self._record_lock:
            return {k: dataclasses.replace(v, mistakes=list(v.mistakes)) for k, v in self._records.items()}

    def records_json(self) -> dict[str, Any]:
        return {"seed": self.mistakes_config.seed, "rates": dataclasses.asdict(self.mistakes_config.rates),
                "pages": [r.as_dict() for r in self.records().values()]}

    def _respond(self, call: ChatCall) -> Reply:
        sha = call.image_sha256 or ""
        if sha not in self.pages:
            raise HttpError(400, f"unknown image: sha256 {sha[:16]}... is not a page of the manifest prepared with "
                                 f"these settings", "unknown_image")
        truth, comp = self.pages[sha], self.plan(sha)
        evidence = '"mrz"' in call.text
        text, marks = render_answer(comp, evidence)
        visible = [m for m in comp.mistakes if evidence or m.field != "mrz"]
        with self._record_lock:
            known = self._records.get(sha)
            if known is not None and known.evidence == evidence:
                known.requests += 1
            else:
                self._records[sha] = AnswerRecord(sha, truth.path, truth.page, truth.doc_type, truth.mrz is not None,
                                                  evidence, visible, (known.requests + 1) if known else 1)
        fields = json.loads(text)
        cfg = self.mistakes_config
        logprobs = None
        if call.body.get("logprobs") and cfg.logprobs == "answer":
            top = int(call.body.get("top_logprobs") or 0)
            logprobs = token_logprobs(text, marks, cfg.logprob_model, random.Random(f"{cfg.seed}:{sha}:logprobs"),
                                      top)
        return Reply(fields=fields, content=text, logprobs=logprobs)


@contextmanager
def truth_model(manifest: Path, key: str, model: str = "truth-vlm", root: Path | None = None,
                **chat: Any) -> Iterator[dict[str, str]]:
    """A `MistakeServer` making no mistakes on `manifest`'s pages (log-probabilities accepted, none returned);
    yields the environment that points a run's `openai` backend at it, with the embedded second reading off. For
    tests whose subject is what a run does around the reading (Prefect, Dask, shards, canaries, the UI), not the
    embedded reader: their runs are as real, without loading the reader in every run process and reading pages with
    it (the second reading has tests of its own). `root`: where the manifest's paths are (default `manifest_root`);
    `chat`: more `ServerConfig` fields (latency...)."""
    config = MistakeConfig(logprobs="ignore", chat=ServerConfig(api_key=key, model=model, **chat))
    with MistakeServer(manifest, Settings(), config, root=root) as server:
        if server.unprepared:
            raise ValueError(f"pages idflow cannot prepare in {manifest}: {server.unprepared}")
        yield {"IDFLOW_BACKEND": "openai", "TAOTOKEN_API_KEY": key, "TAOTOKEN_MODEL": model,
               "TAOTOKEN_BASE_URL": server.base_url, "IDFLOW_OPENAI_CROSSCHECK": "false"}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, required=True)
    parser.add_argument("--root", type=Path, default=None, help="where the manifest's paths are (default: beside it)")
    parser.add_argument("--error-rate", type=float, default=0.0, help="every mistake kind at this rate")
    parser.add_argument("--rate", action="append", default=[], metavar="KIND=P",
                        help=f"one kind's rate, after --error-rate (kinds: {', '.join(KINDS)})")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--logprobs", action="store_true", help="answer logprobs when asked (else ignore them)")
    parser.add_argument("--refuse-logprobs", action="store_true", help="400 when logprobs are asked for")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=ServerConfig.api_key)
    parser.add_argument("--model", default=ServerConfig.model)
    parser.add_argument("--base-path", default="", help='"" (TaoToken-like) or "/v1" (vLLM-like)')
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--max-concurrency", type=int, default=64)
    args = parser.parse_args(argv)
    rates = dataclasses.asdict(MistakeRates.uniform(args.error_rate))
    for item in args.rate:
        kind, _, value = item.partition("=")
        if kind not in KINDS:
            parser.error(f"--rate {item}: kinds are {', '.join(KINDS)}")
        rates[kind] = float(value)
    mode = "refuse" if args.refuse_logprobs else "answer" if args.logprobs else "ignore"
    chat = ServerConfig(api_key=args.api_key, model=args.model, base_path=args.base_path, latency_s=args.latency,
                        max_concurrency=args.max_concurrency)
    config = MistakeConfig(rates=MistakeRates(**rates), seed=args.seed, logprobs=mode, chat=chat)
    server = MistakeServer(args.manifest, Settings(), config, root=args.root, host=args.host, port=args.port)
    print(f"indexed {len(server.pages)} pages ({len(server.unprepared)} not preparable)", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.stop).start())
    print(f"READY {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
