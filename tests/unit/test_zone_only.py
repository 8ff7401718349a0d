"""Zone-only images (a cut-out MRZ) recognised by shape and ink, and normalised to a fixed character height."""

from __future__ import annotations

import random

import numpy as np

from pipeline.extract.ocr import zone_only
from synth import hard as H
from synth import render as R
from synth.identities import random_mrz_person


def _strip(kind: str, seed: int) -> tuple[np.ndarray, R.Rendered]:
    person = random_mrz_person(random.Random(seed), "passport" if kind == "passport" else "id_card")
    rendered = R.passport_td3(person) if kind == "passport" else R.id_card_td1(person)
    return np.asarray(H.mrz_strip(rendered, random.Random(seed)).convert("RGB")), rendered


def test_a_cut_out_zone_is_recognised_with_its_lines() -> None:
    for kind, lines in (("passport", 2), ("td1", 3)):
        for seed in range(4):
            pixels, _ = _strip(kind, seed)
            bands = zone_only.text_bands(pixels)
            assert bands is not None and len(bands) == lines, (kind, seed, bands)


def test_a_whole_document_is_no_zone_only_image() -> None:
    person = random_mrz_person(random.Random(3), "passport")
    for rendered in (R.passport_td3(person), R.id_card_td1(person)):
        assert zone_only.prepared(np.asarray(rendered.image.convert("RGB"))) is None


def test_a_wide_image_without_text_lines_is_not_a_zone() -> None:
    blank = np.full((100, 800, 3), 240, np.uint8)
    assert zone_only.prepared(blank) is None
    stripes = blank.copy()
    for y in range(5, 100, 20):  # five bands of "ink": more lines than a zone has
        stripes[y:y + 8, 20:780] = 20
    assert zone_only.prepared(stripes) is None


def test_normalised_characters_have_the_target_height_and_a_margin() -> None:
    pixels, _ = _strip("passport", 1)
    out = zone_only.prepared(pixels)
    assert out is not None
    bands = zone_only.ink_rows(out.mean(axis=2).astype(np.uint8))
    heights = [b - a + 1 for a, b in bands]
    assert len(bands) == 2 and all(0.8 * zone_only.CHAR_HEIGHT <= h <= 1.25 * zone_only.CHAR_HEIGHT for h in heights)
    pad = round(zone_only.MARGIN * zone_only.CHAR_HEIGHT)
    assert bands[0][0] >= pad and bands[-1][1] < out.shape[0] - pad


def test_two_card_sides_side_by_side_are_no_zone_only_image() -> None:
    """As wide as a zone (a card's two sides scanned next to each other), but with a card's many text rows."""
    card = np.asarray(R.id_card_td1(random_mrz_person(random.Random(4), "id_card")).image.convert("RGB"))
    both = np.concatenate([card, card], axis=1)
    assert both.shape[1] >= zone_only.MIN_ASPECT * both.shape[0]
    assert zone_only.prepared(both) is None
