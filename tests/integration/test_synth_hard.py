"""The hard capture conditions (synth/hard.py) and the hard set generator (`make_samples.py --set hard`)."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from synth import hard as H
from synth import render as R
from synth import sample_set as S
from synth.identities import random_mrz_person
from tests.support.paths import REPO


@pytest.fixture(scope="module")
def passport() -> R.Rendered:
    return R.passport_td3(random_mrz_person(random.Random(9), "passport"))


@pytest.mark.parametrize("name", sorted(H.HARD_CONDITIONS))
def test_hard_conditions_are_deterministic(passport, name):
    fn = H.HARD_CONDITIONS[name][0]
    a = np.asarray(fn(passport, random.Random(5)))
    b = np.asarray(fn(passport, random.Random(5)))
    assert a.shape == b.shape and (a == b).all()
    assert a.shape[:2] != (0, 0)


def test_occlusion_hides_only_fillers(passport):
    """A sticker never covers a name or number character: the columns it covers hold fillers only."""
    for seed in range(12):
        out = np.asarray(H.occlusion(passport, random.Random(seed)).convert("L"), dtype=np.int16)
        diff = np.abs(out - np.asarray(passport.image.convert("L"), dtype=np.int16)) > 40
        for (left, top, right, bottom), line in zip(passport.mrz_boxes, passport.mrz):
            cols = np.flatnonzero(diff[top:bottom, left:right].any(axis=0))
            if len(cols) == 0:
                continue
            char_w = (right - left) / len(line)
            covered = {int(c // char_w) for c in cols if c // char_w < len(line)}
            text_chars = {i for i, ch in enumerate(line) if ch != "<"}
            drawn_box = len(covered) > 0.8 * len(line)  # the other variant: a box outline across the zone
            assert drawn_box or not covered & text_chars


def test_hard_set_build_and_cli(tmp_path):
    out = tmp_path / "hard"
    subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), str(out), "--set", "hard",
                    "--count", "3", "--seed", "5", "--conditions", "glare,jpeg15"], check=True, cwd=REPO,
                   capture_output=True)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest) == 3
    assert {m["condition"] for m in manifest} <= {"glare", "jpeg15"}
    for m in manifest:
        if m["condition"] == "glare":
            assert m["doc_type"] in ("passport", "id_card", "visa")
        assert (out / m["path"]).is_file()
    again = tmp_path / "again"
    S.build_hard(again, 3, 5, conditions=["glare", "jpeg15"])
    assert S.digest_dir(again) == S.digest_dir(out)


def test_phone512_photographs_one_document_not_an_a4_sheet(tmp_path):
    """A 512 px photo of the two-sided A4 photocopy leaves the card's name ~5 px tall (unreadable to a person),
    so the hard set never makes it; every other kind gets the condition."""
    manifest = S.build_hard(tmp_path, 7, 5, conditions=["phone512"])
    kinds = {m["path"].split("_", 1)[1].rsplit("_", 1)[0] for m in manifest}
    assert kinds == set(S.KINDS) - {"cn_both"}


def test_mrz_strip_is_the_zone_alone(tmp_path):
    """A zone-only image: wide (its 2-3 lines fill the frame), 300-1200 px wide, with the name as the zone
    writes it and the strip's own orientation in the ground truth."""
    manifest = S.build_hard(tmp_path, 8, 5, conditions=["mrz_strip"])
    assert {m["doc_type"] for m in manifest} <= {"passport", "id_card", "visa"}
    from PIL import Image

    for m in manifest:
        with Image.open(tmp_path / m["path"]) as img:
            assert 300 <= img.width <= 1250 and img.height < img.width / 2.5
        assert m["orientation"] == "landscape" and m["name"]


def test_an_opt_in_condition_is_only_in_a_set_that_names_it(tmp_path):
    """Adding an opt-in condition leaves every seed's default hard set as it was (its plan, which decides each
    document's kind and condition, names none); naming it gives it."""
    from synth.sample_set import build_hard, hard_plan

    assert not H.OPT_IN & {condition for _, condition in hard_plan(30, 3)}
    # one whole block of the plan (every named condition with every kind its scope allows) holds each of them
    from synth.sample_set import _SCOPE_KINDS

    block = sum(len(_SCOPE_KINDS[H.HARD_CONDITIONS[c][3]]) for c in H.OPT_IN)
    named = build_hard(tmp_path / "n", count=block, seed=3, conditions=sorted(H.OPT_IN))
    assert {row["condition"] for row in named} == set(H.OPT_IN)


def test_kinds_narrow_a_hard_set_to_the_documents_named(tmp_path):
    """`kinds` makes tuning material for one evidence class (blurred PRC fronts, say): every document is of a
    named kind, under a named condition; a kind the conditions never apply to is an error, not an empty set."""
    manifest = S.build_hard(tmp_path / "cn", 6, 5, conditions=["motion_blur", "dark_phone"], kinds=["cn_front"])
    assert len(manifest) == 6
    assert all(m["path"].split("_", 1)[1].startswith("cn_front_") for m in manifest)
    assert {m["condition"] for m in manifest} == {"motion_blur", "dark_phone"}
    with pytest.raises(ValueError, match="no kind"):
        S.build_hard(tmp_path / "none", 2, 5, conditions=["glare"], kinds=["cn_front"])
    with pytest.raises(ValueError, match="unknown"):
        S.build_hard(tmp_path / "bad", 2, 5, kinds=["fr_front"])
