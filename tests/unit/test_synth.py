"""Tests for the synthetic specimen generator (``synth/``) and the committed ``data/sample`` set.

The checksum math here is written independently of both ``synth.identities`` and the pipeline's parsers.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import random
import re
from pathlib import Path

import pytest
from PIL import Image, ImageOps


from synth import conditions as C
from synth import render as R
from synth import sample_set as S
from synth.identities import CN_REGIONS, MRZPerson, random_cn_person, random_mrz_person  # noqa: E402
from tests.support.paths import REPO

SAMPLE_DIR = REPO / "data" / "sample"

# --------------------------------------------------------------------------------------------------------
# Independent checksum implementations
# --------------------------------------------------------------------------------------------------------


def cn_id_valid(s: str) -> bool:
    """GB 11643 / ISO 7064 MOD 11-2, written from the standard: check = (12 - sum(a_i * 2^(18-i) mod 11)) mod 11."""
    if not re.fullmatch(r"\d{17}[\dX]", s):
        return False
    total = sum(int(c) * (2 ** (17 - i) % 11) for i, c in enumerate(s[:17]))
    check = (12 - total % 11) % 11
    return s[17] == ("X" if check == 10 else str(check))


_MRZ_VALUES = {**{str(d): d for d in range(10)}, **{chr(65 + i): 10 + i for i in range(26)}, "<": 0}


def mrz_cd(s: str) -> int:
    return sum(_MRZ_VALUES[c] * (7, 3, 1)[i % 3] for i, c in enumerate(s)) % 10


def cd_ok(field: str, digit: str) -> bool:
    # an all-filler optional field may carry '<' as its check digit (ICAO 9303 part 4)
    if digit == "<":
        return set(field) <= {"<"}
    return digit.isdigit() and int(digit) == mrz_cd(field)


def parse_mrz(lines: tuple[str, ...]) -> dict:
    """Minimal independent MRZ parser that asserts every check digit; returns name/number/expiry."""
    assert all(re.fullmatch(r"[A-Z0-9<]+", ln) for ln in lines), lines
    if len(lines) == 3:  # TD1
        l1, l2, l3 = lines
        assert [len(x) for x in lines] == [30, 30, 30]
        number, exp, name_field = l1[5:14], l2[8:14], l3
        assert cd_ok(l1[5:14], l1[14]) and cd_ok(l2[0:6], l2[6]) and cd_ok(l2[8:14], l2[14])
        assert cd_ok(l1[5:30] + l2[0:7] + l2[8:15] + l2[18:29], l2[29])
    else:
        l1, l2 = lines
        n = len(l1)
        assert n in (36, 44) and len(l2) == n
        number, exp, name_field = l2[0:9], l2[21:27], l1[5:]
        assert cd_ok(l2[0:9], l2[9]) and cd_ok(l2[13:19], l2[19]) and cd_ok(l2[21:27], l2[27])
        if l1[0] == "V":  # MRV: no composite
            pass
        elif n == 44:  # TD3
            assert cd_ok(l2[28:42], l2[42])
            assert cd_ok(l2[0:10] + l2[13:20] + l2[21:43], l2[43])
        else:  # TD2
            assert cd_ok(l2[0:10] + l2[13:20] + l2[21:35], l2[35])
    sur, _, given = name_field.strip("<").partition("<<")
    name = " ".join(x for x in (sur.replace("<", " "), given.strip("<").replace("<", " ")) if x)
    yy, mm, dd = int(exp[:2]), int(exp[2:4]), int(exp[4:6])
    return {"name": name, "id_number": number.rstrip("<"), "expiry": (2000 + yy, mm, dd)}


def test_checksum_reference_vectors():
    assert cn_id_valid("11010519491231002X")  # GB 11643 standard example
    assert not cn_id_valid("110105194912310021")
    # ICAO 9303 specimen TD3 line 2
    parse_mrz(("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"))
    from synth.identities import cn_check_char, mrz_check_digit

    assert cn_check_char("11010519491231002") == "X"
    assert mrz_check_digit("L898902C3") == "6" and mrz_check_digit("ZE184226B<<<<<") == "1"


# --------------------------------------------------------------------------------------------------------
# Identities
# --------------------------------------------------------------------------------------------------------

REGION_CODES = {r[0] for r in CN_REGIONS}


def _check_cn_person(p) -> None:
    n = p.id_number
    assert cn_id_valid(n), n
    assert n[:6] in REGION_CODES
    assert n[6:14] == p.birth.strftime("%Y%m%d")
    assert (int(n[16]) % 2 == 1) == (p.sex == "M")
    assert n[14:17] != "000"


def test_random_cn_people_valid():
    rng = random.Random(11)
    kinds = set()
    for _ in range(300):
        p = random_cn_person(rng)
        _check_cn_person(p)
        kinds.add(p.valid_to is None)
        assert p.valid_to is None or p.valid_to > p.valid_from
    assert kinds == {True, False}


@pytest.mark.parametrize("kind", ["passport", "id_card", "visa"])
def test_random_mrz_valid(kind):
    rng = random.Random(5)
    for _ in range(100):
        p = random_mrz_person(rng, kind, expired=rng.random() < 0.3)
        for lines in (p.td3(), p.td2(), p.td1(), p.mrva()):
            got = parse_mrz(lines)
            assert got["name"] == p.full_name
            assert got["id_number"] == p.doc_number
            assert got["expiry"] == (p.expiry.year, p.expiry.month, p.expiry.day)


def test_mrz_name_rules():
    p = MRZPerson("VAN DER BERG", "JAN PIETER", "M", dt.date(1988, 6, 2), "NLD", "NLD", "IB4027735",
                  dt.date(2023, 3, 1), dt.date(2033, 2, 28))
    assert p.td1()[2] == "VAN<DER<BERG<<JAN<PIETER<<<<<<"
    assert p.td3()[0].startswith("P<NLDVAN<DER<BERG<<JAN<PIETER<")
    assert p.mrva()[0].startswith("V<NLD")


# --------------------------------------------------------------------------------------------------------
# Committed sample set
# --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def committed_truth() -> list[dict]:
    return json.loads(S.truth_path(SAMPLE_DIR).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("sample")
    return out, S.build_sample(out)


def test_sample_deterministic(built, tmp_path):
    out, truth = built
    again = S.build_sample(tmp_path / "again")
    assert again == truth
    assert S.digest_dir(out) == S.digest_dir(tmp_path / "again")


def test_committed_sample_matches_generator(built, committed_truth):
    out, truth = built
    assert committed_truth == truth, "data/sample is stale: run python tools/make_samples.py data/sample"
    committed = {p.relative_to(SAMPLE_DIR).as_posix() for p in SAMPLE_DIR.rglob("*") if p.is_file()}
    assert committed == set(S.digest_dir(out))
    # The bytes of non-image files are platform independent; image bytes depend on the libjpeg/zlib build.
    for rel in ("broken.jpg", "notes.tmp"):
        assert (SAMPLE_DIR / rel).read_bytes() == (out / rel).read_bytes()
    assert S.truth_path(SAMPLE_DIR).read_bytes() == S.truth_path(out).read_bytes()


def test_sample_folder_small():
    total = sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*") if p.is_file())
    assert total < 3_000_000, total


def test_ground_truth_shape_and_schema(committed_truth):
    import jsonschema

    schema = json.loads((REPO / "schemas" / "id_document.schema.json").read_text())
    paths = set()
    kinds = {"good": 0, "failure": 0, "skip": 0}
    for e in committed_truth:
        assert (SAMPLE_DIR / e["path"]).is_file(), e["path"]
        paths.add(e["path"])
        if "expect_failure" in e:
            assert set(e) == {"path", "expect_failure"}
            assert e["expect_failure"] in {"unsupported_type", "unreadable", "decode_error"}
            kinds["failure"] += 1
        elif "expect_skip" in e:
            assert e == {"path": e["path"], "expect_skip": True}
            kinds["skip"] += 1
        else:
            assert set(e) == {"path", "page", "doc_type", "name", "id_number", "expiry_date", "orientation", "issuer"}
            # the issuer is the truth of a decision column, not a field a model answers
            jsonschema.validate({k: v for k, v in e.items() if k not in ("path", "page", "issuer")}, schema)
            kinds["good"] += 1
    assert kinds["good"] >= 10 and kinds["failure"] == 2 and kinds["skip"] == 1
    on_disk = {p.relative_to(SAMPLE_DIR).as_posix() for p in SAMPLE_DIR.rglob("*") if p.is_file()}
    assert on_disk == paths  # every file in the folder is described, the truth file itself sits beside it
    doc_types = {e.get("doc_type") for e in committed_truth} - {None}
    assert doc_types == {"cn_id", "passport", "id_card", "visa"}
    expiries = [e.get("expiry_date") for e in committed_truth]
    assert "long-term" in expiries and None in expiries


def _upright(path: Path, page: int, rotation: int) -> Image.Image:
    if path.suffix == ".pdf":
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(str(path))
        assert len(doc) == 1
        return doc[page].render(scale=1).to_pil()
    img = ImageOps.exif_transpose(Image.open(path))
    return img.rotate(rotation, expand=True) if rotation else img  # PIL rotates counter-clockwise


def test_ground_truth_matches_render(committed_truth):
    """Each truth field is really drawn on the page; fields the page does not show are really absent."""
    by_path = {e["path"]: e for e in committed_truth}
    for i, item in enumerate(S.sample_items()):
        entries, _, rendered = S.make_item(i, item)
        truth = by_path[item.path]
        assert entries == [truth]
        if not rendered:
            continue
        (r,) = rendered
        texts = "\n".join(r.texts)
        img = _upright(SAMPLE_DIR / item.path, 0, item.rotation)
        assert truth["orientation"] == ("landscape" if img.width >= img.height else "portrait"), item.path
        if truth["doc_type"] == "cn_id":
            if truth["name"] is None:
                assert "姓名" not in texts and not re.search(r"\d{17}[\dX]", texts)
            else:
                assert truth["name"] in r.texts and truth["id_number"] in r.texts
                assert cn_id_valid(truth["id_number"])
            if truth["expiry_date"] is None:
                assert "有效期限" not in texts
            elif truth["expiry_date"] == "long-term":
                assert re.search(r"\d{4}\.\d{2}\.\d{2}(-|—|至)长期", texts)
            else:
                assert re.search(r"\d{4}\.\d{2}\.\d{2}(-|—|至)" + truth["expiry_date"].replace("-", r"\."), texts)
        else:
            got = parse_mrz(r.mrz)
            assert got["name"] == truth["name"] and got["id_number"] == truth["id_number"]
            y, m, d = map(int, truth["expiry_date"].split("-"))
            assert got["expiry"] == (y, m, d)
            assert truth["id_number"] in r.texts
            assert f"{d:02d} {'JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC'.split()[m - 1]} {y}" in r.texts
            first = {"passport": "P", "id_card": "I", "visa": "V"}[truth["doc_type"]]
            assert r.mrz[0][0] == first


def test_bad_files_are_bad():
    data = (SAMPLE_DIR / "broken.jpg").read_bytes()
    assert not data.startswith(b"\xff\xd8")
    with pytest.raises(Exception):
        Image.open(SAMPLE_DIR / "broken.jpg")
    png = (SAMPLE_DIR / "truncated.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(Exception):
        Image.open(io.BytesIO(png)).load()


def test_exif_sample_displays_upright():
    img = Image.open(SAMPLE_DIR / "id_card_td2_exif.jpg")
    assert img.getexif().get(0x0112) == 6
    assert img.height > img.width
    up = ImageOps.exif_transpose(img)
    assert up.width > up.height


# --------------------------------------------------------------------------------------------------------
# Conditions and containers
# --------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def card() -> Image.Image:
    return R.cn_front(S.sample_people()["zhang_wei"]).image


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_roundtrip(card, orientation):
    stored = C.exif_stored_pixels(card, orientation)
    data = C.encode(stored, "png")  # lossless check of the pixel transform ...
    shown = Image.open(io.BytesIO(data))
    shown.info["exif"] = b""
    ex = shown.getexif()
    ex[0x0112] = orientation
    assert ImageOps.exif_transpose(shown).tobytes() == card.tobytes()
    jpg = Image.open(io.BytesIO(C.encode(stored, "jpeg", exif_orientation=orientation)))  # ... and the tag
    assert jpg.getexif().get(0x0112) == orientation and ImageOps.exif_transpose(jpg).size == card.size


def test_rotate_is_clockwise(card):
    r90 = C.rotate(card, 90)
    assert r90.size == (card.height, card.width)
    # the top-left corner of the upright card ends up top-right when turned clockwise
    assert r90.getpixel((r90.width - 1, 0)) == card.getpixel((0, 0))
    assert C.rotate(C.rotate(card, 90), 270).tobytes() == card.tobytes()


@pytest.mark.parametrize("name", sorted(C.CONDITIONS))
def test_conditions_pure_and_deterministic(card, name):
    fn = C.CONDITIONS[name]
    before = card.tobytes()
    a, b = fn(card, random.Random(3)), fn(card, random.Random(3))
    assert card.tobytes() == before
    assert a.mode == "RGB" and a.tobytes() == b.tobytes()
    if name == "flatbed":
        assert max(a.size) == 4000
    if name == "small":
        assert max(a.size) == 500


@pytest.mark.parametrize("fmt", sorted(C.FORMATS))
def test_containers_deterministic(card, fmt):
    pages = [card, C.rotate(card, 180)] if fmt in ("tiff", "pdf") else [card]
    a, b = C.encode(pages, fmt), C.encode(pages, fmt)
    assert a == b
    if fmt == "pdf":
        import pypdfium2 as pdfium

        assert len(pdfium.PdfDocument(a)) == 2
    else:
        img = Image.open(io.BytesIO(a))
        assert getattr(img, "n_frames", 1) == len(pages)


def test_font_lookup_error_names_package(monkeypatch):
    monkeypatch.setattr(R, "_FONT_DIRS", ("/nonexistent-fonts",))
    monkeypatch.setenv("SYNTH_FONT_DIR", "")
    with pytest.raises(R.FontNotFoundError, match="fonts-wqy-zenhei"):
        R.font_path.__wrapped__("cjk")


# --------------------------------------------------------------------------------------------------------
# Eval set
# --------------------------------------------------------------------------------------------------------


def test_eval_plan_covers_all_combinations():
    plan = S._eval_plan(len(S.KINDS) * len(S.EVAL_CONDITIONS), 7)
    assert set(plan) == {(k, c) for k in S.KINDS for c in S.EVAL_CONDITIONS}


def test_eval_small_build(tmp_path):
    m1 = S.build_eval(tmp_path / "a", count=6, seed=3)
    assert json.loads((tmp_path / "a" / S.MANIFEST).read_text(encoding="utf-8")) == m1
    plan = S._eval_plan(6, 3)
    docs = sorted({e["path"] for e in m1 if "page" in e})
    assert len(docs) == 6
    # determinism: regenerate two documents and compare bytes and manifest entries
    for i in (1, 2):
        rel, data, truth = S._eval_one(i, *plan[i - 1], 3)
        assert (tmp_path / "a" / rel).read_bytes() == data
        assert [e for e in m1 if e["path"] == rel] == truth
    for e in m1:
        assert "condition" in e and (tmp_path / "a" / e["path"]).is_file()
        if "page" in e:
            assert set(e) == {"path", "page", "doc_type", "name", "id_number", "expiry_date", "orientation",
                              "issuer", "condition"}
            if e["doc_type"] == "cn_id" and e["id_number"]:
                assert cn_id_valid(e["id_number"])
    assert any(e.get("expect_skip") for e in m1) and any(e.get("expect_failure") for e in m1)


def test_zone_name_reads_the_name_field_of_each_zone_format():
    from synth.hard import zone_name

    td3 = ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10")
    td1 = ("I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6", "ERIKSSON<<ANNA<MARIA<<<<<<<<<<")
    assert zone_name(td3) == zone_name(td1) == "ERIKSSON ANNA MARIA"


def test_printed_zone_conditions_hide_the_printed_name_and_keep_the_zone(tmp_path):
    """The conditions made for the calibration's zone-only classes: deterministic, the name in the truth is the
    zone's (what the picture still shows), and the zone's band is left as rendered where the printed fields are
    covered."""
    import numpy as np

    from synth import hard as H

    person = random_mrz_person(random.Random(5), "passport")
    r = R.passport_td3(person)
    for name in ("printed_covered", "infrared", "glare_printed", "scan600", "booklet_spread"):
        fn = H.HARD_CONDITIONS[name][0]
        a, b = fn(r, random.Random(9)), fn(r, random.Random(9))
        assert a.tobytes() == b.tobytes(), name
    covered = H.printed_covered(r, random.Random(1))
    if covered.size == r.image.size:  # not photographed: the pixels compare place by place
        x0, y0, x1, y1 = H._mrz_band(r)
        px0, py0, px1, py1 = H._printed_region(r)
        before, after = np.asarray(r.image.convert("RGB")), np.asarray(covered)
        assert (before[y0:y1, x0:x1] == after[y0:y1, x0:x1]).all()
        assert (before[py0:py1, px0:px1] != after[py0:py1, px0:px1]).any(axis=2).mean() > 0.3
    rows = S.build_hard(tmp_path / "z", count=8, seed=4, conditions=["printed_covered", "infrared"])
    for i, row in enumerate(rows, start=1):  # the same document as the set's worker renders
        kind = row["path"].split("_")[1]
        rendered, _ = S._render_kind(kind, S._rng(4, "hard", i))
        assert row["condition"] in H.ZONE_NAME_ONLY and row["name"] == H.zone_name(rendered.mrz), row["path"]
    assert "printed_covered" in H.OPT_IN and "cn_back_long_term" in S.TUNING_KINDS


def test_the_long_term_tuning_kind_is_a_long_term_card_back():
    r, person = S._render_kind("cn_back_long_term", random.Random(3))
    assert r.kind == "cn_back" and r.expiry_date == "long-term"
