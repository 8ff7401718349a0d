"""The committed ``data/sample`` set and the (uncommitted) ``eval`` set.

Both are pure functions of the seed: the same seed gives the same file bytes and the same
``ground_truth.json`` / ``manifest.json``, so regenerating the committed set does not churn git.

Ground-truth entries (one per page for good documents):

    {"path": "cn_front.jpg", "page": 0, "doc_type": "cn_id", "name": "张伟", "id_number": "...",
     "expiry_date": null, "orientation": "landscape"}
    {"path": "broken.jpg", "expect_failure": "unsupported_type"}
    {"path": "notes.tmp", "expect_skip": true}

``orientation`` is the layout of the *upright page* (a card scanned on an A4 page is "portrait"). The eval
manifest has the same shape plus a ``condition`` key per entry.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from synth import conditions as C
from synth import hard as H
from synth import render as R
from synth import render_national as RN
from synth import render_template as RT
from synth.identities import CNPerson, MRZPerson, make_cn_person, random_cn_person, random_mrz_person

SAMPLE_SEED = 20260101
GROUND_TRUTH = "ground_truth.json"


def truth_path(out_dir: str | Path) -> Path:
    """The ground truth sits beside the folder, not in it: inside, ingest would count it as an input."""
    out = Path(out_dir)
    return out.parent / f"{out.name}_{GROUND_TRUTH}"
MANIFEST = "manifest.json"


def _rng(*parts: object) -> random.Random:
    """Independent deterministic RNG per item (string seeds are hashed with SHA-512 by ``random``)."""
    return random.Random(":".join(map(str, parts)))


def _orientation(img: Image.Image) -> str:
    return "landscape" if img.width >= img.height else "portrait"


def _truth(path: str, r: R.Rendered, page: int = 0, orientation: str | None = None, **extra) -> dict:
    return {"path": path, "page": page, **r.truth(), "orientation": orientation or r.orientation, **extra}


def _write(out: Path, rel: str, data: bytes) -> None:
    p = out / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def truncated_png(img: Image.Image, keep: float = 0.4) -> bytes:
    """A PNG cut off part-way through its image data: valid signature and IHDR, undecodable pixels."""
    data = C.encode(img, "png")
    return data[: int(len(data) * keep)]


BROKEN_JPG = (b"This is not a JPEG image.\n"
              b"It is a plain-text file that was given a .jpg name by mistake; the pipeline must report it\n"
              b"as a failure (unsupported type) instead of crashing.\n")
NOTES_TMP = (b"scanner operator notes (temporary file, must be skipped, not processed)\n"
             b"batch 2026-01 / station 3\n")


# --------------------------------------------------------------------------------------------------------
# Fixed fake identities for the committed sample set (never real people; numbers generated here)
# --------------------------------------------------------------------------------------------------------

def sample_people() -> dict[str, CNPerson | MRZPerson]:
    d = dt.date
    return {
        # 31 at issue -> 20 years
        "zhang_wei": make_cn_person("张伟", "M", d(1990, 3, 7), "110101", d(2021, 6, 15), 123, "和平里", 9),
        # 57 at issue -> 长期
        "li_na": make_cn_person("李娜", "F", d(1958, 11, 22), "310104", d(2016, 9, 3), 248, "建设大街", 56),
        # 22 at issue -> 10 years
        "wang_fang": make_cn_person("王芳", "F", d(1996, 8, 19), "440106", d(2019, 4, 10), 86, "中山路", 120,
                                    ethnicity="壮"),
        "liu_yang": make_cn_person("刘洋", "M", d(1985, 12, 1), "330106", d(2018, 1, 20), 517, "文化路", 33),
        "chen_jing": make_cn_person("陈静", "F", d(2001, 5, 30), "510107", d(2022, 7, 8), 64, "光明路", 7),
        "zhao_sijia": make_cn_person("赵思佳", "F", d(1978, 2, 14), "420106", d(2012, 10, 9), 302, "青年路", 211,
                                     ethnicity="回"),
        "eriksson": MRZPerson("ERIKSSON", "ANNA MARIA", "F", d(1974, 8, 12), "UTO", "UTO", "UT4815926",
                              d(2021, 4, 16), d(2031, 4, 15), optional="ZE184226B", place_of_birth="ZENITH"),
        # expired passport (still valid data)
        "zhang_wei_pp": MRZPerson("ZHANG", "WEI", "M", d(1990, 3, 7), "CHN", "CHN", "E83710524",
                                  d(2014, 10, 1), d(2024, 9, 30), place_of_birth="BEIJING"),
        "van_der_berg": MRZPerson("VAN DER BERG", "JAN PIETER", "M", d(1988, 6, 2), "NLD", "NLD", "IB4027735",
                                  d(2023, 3, 1), d(2033, 2, 28), place_of_birth="UTRECHT"),
        "dubois": MRZPerson("DUBOIS", "SOPHIE", "F", d(1992, 1, 25), "FRA", "FRA", "D23145890",
                            d(2020, 11, 6), d(2030, 11, 5), place_of_birth="LYON"),
        "smith_visa": MRZPerson("SMITH", "JOHN DAVID", "M", d(1983, 9, 17), "CAN", "GBR", "VN0382716",
                                d(2025, 9, 1), d(2027, 8, 31)),
    }


@dataclass(frozen=True)
class SampleItem:
    """One committed file. ``make(rng)`` returns (ground-truth entries, file bytes, rendered pages)."""

    path: str
    make: Callable[[random.Random], tuple[list[dict], bytes, list[R.Rendered]]]
    note: str
    rotation: int = 0  # content rotation (clockwise) of the stored pixels after applying any EXIF tag


def _single(path: str, r: R.Rendered, img: Image.Image, fmt: str, *, quality: int = 82,
            exif: int | None = None) -> tuple[list[dict], bytes, list[R.Rendered]]:
    return [_truth(path, r)], C.encode(img, fmt, quality=quality, exif_orientation=exif), [r]


def sample_items() -> list[SampleItem]:
    P = sample_people()
    items: list[SampleItem] = []

    def add(path, note, rotation=0):
        def deco(fn):
            items.append(SampleItem(path, fn, note, rotation))
            return fn
        return deco

    @add("cn_front.jpg", "CN ID front, clean")
    def _(rng):
        r = R.cn_front(P["zhang_wei"])
        return _single("cn_front.jpg", r, r.image, "jpeg")

    @add("cn_back.jpg", "CN ID back, validity 2021.06.15-2041.06.15")
    def _(rng):
        r = R.cn_back(P["zhang_wei"], "-")
        return _single("cn_back.jpg", r, r.image, "jpeg")

    @add("cn_back_longterm.jpg", "CN ID back, validity ...-长期")
    def _(rng):
        r = R.cn_back(P["li_na"], "-")
        return _single("cn_back_longterm.jpg", r, r.image, "jpeg")

    @add("cn_both_sides.jpg", "CN ID front above back on an A4 page, separator '—'")
    def _(rng):
        r = R.cn_both_sides(P["wang_fang"], "—")
        return _single("cn_both_sides.jpg", r, r.image, "jpeg", quality=80)

    @add("cn_front_rot90.jpg", "CN ID front, content rotated 90° clockwise (pixels, no EXIF)", rotation=90)
    def _(rng):
        r = R.cn_front(P["liu_yang"])
        return _single("cn_front_rot90.jpg", r, C.rotate(r.image, 90), "jpeg")

    @add("cn_front_photo.jpg", "CN ID front photographed on a table: perspective, ~6° rotation, uneven light")
    def _(rng):
        r = R.cn_front(P["chen_jing"])
        img = C.photo(r.image, rng, min_deg=5.5, max_deg=6.5)
        return _single("cn_front_photo.jpg", r, img, "jpeg", quality=85)

    @add("passport_td3.jpg", "ICAO TD3 passport data page, clean")
    def _(rng):
        r = R.passport_td3(P["eriksson"])
        return _single("passport_td3.jpg", r, r.image, "jpeg")

    @add("passport_rot180.jpg", "TD3 passport (expired 2024-09-30), upside down", rotation=180)
    def _(rng):
        r = R.passport_td3(P["zhang_wei_pp"])
        return _single("passport_rot180.jpg", r, C.rotate(r.image, 180), "jpeg")

    @add("id_card_td1.jpg", "ICAO TD1 ID card (3x30 MRZ), compound surname")
    def _(rng):
        r = R.id_card_td1(P["van_der_berg"])
        return _single("id_card_td1.jpg", r, r.image, "jpeg")

    @add("id_card_td2_exif.jpg", "ICAO TD2 card (2x36 MRZ); pixels stored rotated, EXIF Orientation=6")
    def _(rng):
        r = R.id_card_td2(P["dubois"])
        return _single("id_card_td2_exif.jpg", r, C.exif_stored_pixels(r.image, 6), "jpeg", exif=6)

    @add("visa_mrva.jpg", "MRV-A visa (2x44 MRZ starting V), GBR visa for a CAN national")
    def _(rng):
        r = R.visa_mrva(P["smith_visa"])
        return _single("visa_mrva.jpg", r, r.image, "jpeg")

    @add("scans/cn_front_scan.pdf", "one-page PDF (JPEG inside) of a CN ID front, slight skew, in a subfolder")
    def _(rng):
        r = R.cn_front(P["zhao_sijia"])
        img = C.skew(r.image, rng, angle=1.5)
        return _single("scans/cn_front_scan.pdf", r, img, "pdf", quality=80)

    @add("broken.jpg", "text file with a .jpg name")
    def _(rng):
        return [{"path": "broken.jpg", "expect_failure": "unsupported_type"}], BROKEN_JPG, []

    @add("truncated.png", "PNG cut off at 40 % (valid header, undecodable)")
    def _(rng):
        return ([{"path": "truncated.png", "expect_failure": "decode_error"}],
                truncated_png(R.passport_td3(P["eriksson"]).image), [])

    @add("notes.tmp", "temporary file, must be skipped")
    def _(rng):
        return [{"path": "notes.tmp", "expect_skip": True}], NOTES_TMP, []

    return items


def make_item(index: int, item: SampleItem, seed: int = SAMPLE_SEED) -> tuple[list[dict], bytes, list[R.Rendered]]:
    """Build one sample item exactly as :func:`build_sample` does (same per-item RNG)."""
    return item.make(_rng(seed, "sample", index, item.path))


def build_sample(out_dir: str | Path, seed: int = SAMPLE_SEED) -> list[dict]:
    """Write the sample set into ``out_dir`` and its ground truth beside it; return the ground truth."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    truth: list[dict] = []
    for i, item in enumerate(sample_items()):
        entries, data, _ = make_item(i, item, seed)
        _write(out, item.path, data)
        truth.extend(entries)
    truth_path(out).write_text(json.dumps(truth, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return truth


def sample_notes() -> dict[str, str]:
    return {it.path: it.note for it in sample_items()}


# --------------------------------------------------------------------------------------------------------
# Eval set
# --------------------------------------------------------------------------------------------------------

KINDS = ("cn_front", "cn_back", "cn_both", "passport", "td1", "td2", "visa")
# Opt-in kinds (`--kinds`): national cards (`synth.render_national`: fronts whose zone is on the back, the French
# 1988 card's two sides); a default set, which draws from `KINDS` only, is the same per seed as before they existed.
OPT_IN_KINDS = tuple(RN.NATIONAL_FRONTS)
# Tuning kinds (`--kinds`): a rare evidence class made in quantity for the calibration table (a 长期 card back
# is a quarter of `cn_back`'s; a French 1988 back whose issue date is under the authority's stamp, so its printed
# expiry stands alone); the same documents as that kind otherwise. `alb_template`: the MIDV-2020 Albanian card
# template with other mock holders' values (`synth.render_template`; needs the templates, read where they lie).
TUNING_KINDS = ("cn_back_long_term", *RN.TUNING_FRONTS, "alb_template")
# condition -> (image transform applied upright, rotation/EXIF step, container, JPEG/WebP quality)
EVAL_CONDITIONS: dict[str, tuple[str, str | None, str, int]] = {
    "clean_png": ("clean", None, "png", 0),
    "clean_jpeg": ("clean", None, "jpeg", 88),
    "rot90": ("clean", "rot90", "jpeg", 88),
    "rot180": ("clean", "rot180", "jpeg", 88),
    "rot270": ("clean", "rot270", "jpeg", 88),
    "exif_rot": ("clean", "exif", "jpeg", 88),
    "skew": ("skew", None, "jpeg", 88),
    "photo": ("photo", None, "jpeg", 85),
    "blur": ("blur", None, "jpeg", 88),
    "noise": ("noise", None, "jpeg", 88),
    "low_contrast": ("low_contrast", None, "jpeg", 88),
    "jpeg25": ("jpeg25", None, "jpeg", 25),
    "flatbed": ("flatbed", None, "jpeg", 80),
    "small": ("small", None, "jpeg", 90),
    "webp": ("clean", None, "webp", 85),
    "tiff": ("clean", None, "tiff", 0),
    "tiff_multi": ("clean", None, "tiff", 0),
    "pdf": ("clean", None, "pdf", 85),
    "pdf_multi": ("clean", None, "pdf", 85),
}
_MULTI = {"tiff_multi", "pdf_multi"}


def _render_kind(kind: str, rng: random.Random) -> tuple[R.Rendered, object]:
    """Render a random document of ``kind``; returns it and the person (for a matching second page)."""
    variant = rng.randrange(4)
    if kind in RN.NATIONAL_FRONTS or kind in RN.TUNING_FRONTS:
        return RN.render_national(kind, rng, variant)
    if kind == "alb_template":
        return RT.alb_card(rng), None
    if kind == "cn_back_long_term":
        p = random_cn_person(rng, long_term=True)
        return R.cn_back(p, rng.choice(("-", "-", "—", "至")), variant), p
    if kind in ("cn_front", "cn_back", "cn_both"):
        p = random_cn_person(rng, long_term=rng.random() < 0.25 if kind != "cn_front" else None)
        sep = rng.choice(("-", "-", "—", "至"))
        if kind == "cn_front":
            return R.cn_front(p, variant), p
        if kind == "cn_back":
            return R.cn_back(p, sep, variant), p
        return R.cn_both_sides(p, sep, variant), p
    mrz_kind = {"passport": "passport", "td1": "id_card", "td2": "id_card", "visa": "visa"}[kind]
    p = random_mrz_person(rng, mrz_kind, expired=rng.random() < 0.08)
    fn = {"passport": R.passport_td3, "td1": R.id_card_td1, "td2": R.id_card_td2, "visa": R.visa_mrva}[kind]
    return fn(p, variant), p


def _eval_plan(count: int, seed: int, combos: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """``count`` (kind, condition) pairs: every combination once per round, rounds shuffled by seed."""
    combos = combos or [(k, c) for k in KINDS for c in EVAL_CONDITIONS]
    plan: list[tuple[str, str]] = []
    rnd = 0
    while len(plan) < count:
        block = list(combos)
        _rng(seed, "plan", rnd).shuffle(block)
        plan.extend(block)
        rnd += 1
    return plan[:count]


def _eval_one(i: int, kind: str, cond: str, seed: int) -> tuple[str, bytes, list[dict]]:
    rng = _rng(seed, "eval", i)
    transform, rot, fmt, quality = EVAL_CONDITIONS[cond]
    r, person = _render_kind(kind, rng)
    pages = [r]
    if cond in _MULTI:
        if isinstance(person, CNPerson) and kind == "cn_front":
            pages.append(R.cn_back(person, "-"))
        elif isinstance(person, CNPerson) and kind == "cn_back":
            pages.insert(0, R.cn_front(person))
        else:
            pages.append(_render_kind(kind, rng)[0])
    ext = C.FORMATS[fmt]
    rel = f"e{i:04d}_{kind}_{cond}{ext}"
    images, truth = [], []
    exif = None
    for page_no, pr in enumerate(pages):
        img = C.CONDITIONS[transform](pr.image, rng)
        orientation = _orientation(img)
        if rot == "exif":
            exif = rng.choice((3, 6, 8))
            img = C.exif_stored_pixels(img, exif)
        elif rot:
            img = C.CONDITIONS[rot](img, rng)
        images.append(img)
        truth.append(_truth(rel, pr, page_no, orientation, condition=cond))
    data = C.encode(images, fmt, quality=quality or 85, exif_orientation=exif, title=rel.rsplit(".", 1)[0])
    return rel, data, truth


def _eval_bad_files(seed: int) -> list[tuple[str, bytes, dict]]:
    rng = _rng(seed, "eval-bad")
    r, _ = _render_kind("passport", rng)
    jpg = C.encode(r.image, "jpeg")
    return [
        ("bad_text_as.jpg", BROKEN_JPG, {"expect_failure": "unsupported_type", "condition": "text_as_jpeg"}),
        ("bad_truncated.png", truncated_png(r.image), {"expect_failure": "decode_error", "condition": "truncated"}),
        ("bad_truncated.jpg", jpg[: len(jpg) // 3], {"expect_failure": "decode_error", "condition": "truncated"}),
        ("bad_empty.jpg", b"", {"expect_failure": "empty_file", "condition": "empty"}),
        ("notes.tmp", NOTES_TMP, {"expect_skip": True, "condition": "temporary"}),
        (".DS_Store", b"\x00\x00\x00\x01Bud1" + bytes(64), {"expect_skip": True, "condition": "hidden"}),
        ("upload.part", jpg[: len(jpg) // 2], {"expect_skip": True, "condition": "in_progress"}),
    ]


def _eval_worker(args: tuple[int, str, str, int, str]) -> list[dict]:
    i, kind, cond, seed, out = args
    rel, data, truth = _eval_one(i, kind, cond, seed)
    _write(Path(out), rel, data)
    return truth


def _run_tasks(worker: Callable[[tuple], list[dict]], tasks: list[tuple], jobs: int) -> list[dict]:
    if jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(jobs) as ex:
            results = list(ex.map(worker, tasks, chunksize=4))
    else:
        results = [worker(t) for t in tasks]
    return [e for entries in results for e in entries]


def _write_manifest(out: Path, manifest: list[dict]) -> None:
    (out / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")


def build_eval(out_dir: str | Path, count: int = 300, seed: int = 7, jobs: int = 1,
               kinds: list[str] | None = None) -> list[dict]:
    """Write ``count`` documents across all kinds x conditions (only ``kinds`` when given: tuning material for
    a rare evidence class, e.g. the 长期 card backs), a few bad/skip files and ``manifest.json``."""
    unknown = set(kinds or ()) - set(KINDS) - set(OPT_IN_KINDS) - set(TUNING_KINDS)
    if unknown:
        raise ValueError(f"unknown kinds: {sorted(unknown)}")
    combos = [(k, c) for k in kinds for c in EVAL_CONDITIONS] if kinds else None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [(i, k, c, seed, str(out)) for i, (k, c) in enumerate(_eval_plan(count, seed, combos), start=1)]
    manifest = _run_tasks(_eval_worker, tasks, jobs)
    for rel, data, entry in _eval_bad_files(seed):
        _write(out, rel, data)
        manifest.append({"path": rel, **entry})
    _write_manifest(out, manifest)
    return manifest


# --------------------------------------------------------------------------------------------------------
# Hard set (tuning material for the MRZ second reading and the confidence calibration)
# --------------------------------------------------------------------------------------------------------

MRZ_KINDS = ("passport", "td1", "td2", "visa")
# the kinds each scope of a hard condition (``synth.hard.Scope``) applies to
_SCOPE_KINDS: dict[str, tuple[str, ...]] = {"any": KINDS, "mrz": MRZ_KINDS,
                                            "one": tuple(k for k in KINDS if k != "cn_both")}


def _hard_worker(args: tuple[int, str, str, int, str]) -> list[dict]:
    i, kind, cond, seed, out = args
    rng = _rng(seed, "hard", i)
    transform, fmt, quality, _ = H.HARD_CONDITIONS[cond]
    r, _person = _render_kind(kind, rng)
    img = transform(r, rng)
    rel = f"h{i:04d}_{kind}_{cond}{C.FORMATS[fmt]}"
    _write(Path(out), rel, C.encode(img, fmt, quality=quality))
    truth = _truth(rel, r, 0, condition=cond)  # every hard condition but the two below keeps the page's aspect
    if cond in H.ZONE_NAME_ONLY:  # the printed name is not on the picture: the name as the zone writes it
        truth.update(name=H.zone_name(r.mrz))
    if cond in ("mrz_strip", "booklet_spread"):  # the strip's or the spread's own aspect
        truth.update(orientation=_orientation(img))
    return [truth]


def hard_plan(count: int, seed: int, conditions: list[str] | None = None,
              kinds: list[str] | None = None) -> list[tuple[str, str]]:
    """The (kind, condition) of each of the ``count`` documents `build_hard` makes with these arguments: the
    hard conditions (all but the opt-in ones unless ``conditions`` names some), each with the kinds its scope
    allows, of ``kinds`` when given."""
    names = conditions or [c for c in H.HARD_CONDITIONS if c not in H.OPT_IN]
    unknown = set(names) - set(H.HARD_CONDITIONS)
    if unknown:
        raise ValueError(f"unknown hard conditions: {sorted(unknown)}")
    if set(kinds or ()) - set(KINDS):
        raise ValueError(f"unknown hard-set kinds: {sorted(set(kinds or ()) - set(KINDS))}")
    combos = [(k, c) for c in names for k in _SCOPE_KINDS[H.HARD_CONDITIONS[c][3]] if not kinds or k in kinds]
    if not combos:
        raise ValueError(f"no kind of {sorted(kinds or ())} is made under {sorted(names)}")
    return _eval_plan(count, seed, combos)


def build_hard(out_dir: str | Path, count: int = 120, seed: int = 101, jobs: int = 1,
               conditions: list[str] | None = None, kinds: list[str] | None = None) -> list[dict]:
    """Write ``count`` documents under the hard conditions (``synth.hard``; all but the opt-in ones unless
    ``conditions`` names some) and ``manifest.json``. Each condition uses the kinds its scope allows, of
    ``kinds`` when given (tuning material for one evidence class: blurred PRC fronts, say)."""
    plan = hard_plan(count, seed, conditions, kinds)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [(i, k, c, seed, str(out)) for i, (k, c) in enumerate(plan, start=1)]
    manifest = _run_tasks(_hard_worker, tasks, jobs)
    _write_manifest(out, manifest)
    return manifest


def digest_dir(path: str | Path) -> dict[str, str]:
    """sha256 of every file under ``path`` (relative posix path -> hex), for determinism checks."""
    root = Path(path)
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}
