"""A machine-readable zone at 90° to the page's text (pipeline/extract/ocr/mrz_reread.py, the second reading in
pipeline/extract/ocr/backend.py), on generated pages read by the real models.

A zone crossed by a line from top to bottom (a camera preview's crosshair, a guide frame's side): the second
reading paints the line out of its strips (`mrz_reread.vertical_rules`).

The synth conditions (`synth.hard.zone_rot90`, `synth.hard.crosshair`) are checked here too, against the
renderer's own geometry.
"""

from __future__ import annotations

import random
from datetime import date

import numpy as np
import pytest
from PIL import ImageDraw

from pipeline.extract.ocr import mrz_reread
from pipeline.extract.ocr.backend import read_page
from synth import hard as H
from synth import render as R
from synth.identities import random_mrz_person

TODAY = date(2026, 11, 30)


def _passport(seed: int) -> R.Rendered:
    return R.passport_td3(random_mrz_person(random.Random(seed), "passport"))


def _td1(seed: int) -> R.Rendered:
    return R.id_card_td1(random_mrz_person(random.Random(seed), "id_card"))


@pytest.mark.parametrize("render,degrees", [(_passport(31), 90), (_passport(32), 270), (_td1(33), 270)])
def test_a_zone_at_90_degrees_is_read_upright(render, degrees):
    """The page's printed text is upright and its zone runs down the page beside it, either way round: the
    second reading finds the zone on the page turned, and its check digits pass with every field right."""
    pixels = np.asarray(H.zone_beside(render, degrees, 0.85, 20))
    reading, rotation = read_page(pixels, TODAY, try_flipped=False)
    assert rotation == 0
    assert {"mrz.number", "mrz.expiry", "cross.number_mrz_vs_viz"} <= set(reading.checks)
    assert not [c for c in reading.check_failures if c.startswith("mrz.")]
    assert reading.fields["id_number"] == render.id_number
    assert reading.fields["expiry_date"] == render.expiry_date
    assert reading.fields["name"] == render.name


def test_a_turned_zone_whose_data_line_is_gone_gives_no_zone_values():
    """Only the name line of the turned zone is left (the data line painted out): nothing in the zone has a
    check digit to pass, so no zone check passes and no value comes from the zone; whatever the printed zone
    gives is the page's own print."""
    render = _passport(34)
    img = render.image.copy()
    x0, y0, x1, y1 = render.mrz_boxes[1]
    ImageDraw.Draw(img).rectangle((x0 - 5, y0 - 5, x1 + 5, y1 + 5), fill=(252, 252, 250))
    blanked = R.Rendered(img, render.doc_type, render.name, render.id_number, render.expiry_date,
                         render.orientation, mrz=render.mrz, mrz_boxes=render.mrz_boxes, kind=render.kind)
    reading, _ = read_page(np.asarray(H.zone_beside(blanked, 90, 0.85, 20)), TODAY, try_flipped=False)
    assert not {"mrz.number", "mrz.expiry"} & set(reading.checks)
    for key, truth in (("id_number", render.id_number), ("expiry_date", render.expiry_date)):
        assert reading.fields[key] in (None, truth)


def test_a_page_without_a_turned_zone_costs_two_recognitions_at_most():
    """An upright page whose zone is where it belongs: turned 90° its zone lines stand across the page, and
    what else looks zone-shaped (edges, rules) never reads as zone text, so nothing is read beyond one probe
    per turn."""
    from pipeline.extract.ocr.backend import recognise_line

    render = _passport(35)
    calls: list[str] = []

    def recognise(img: np.ndarray) -> mrz_reread.Recognised:
        read = recognise_line(img)
        calls.append(read.text)
        return read

    assert not list(mrz_reread.reread_turned(np.asarray(render.image.convert("RGB")), recognise))
    assert len(calls) <= 2


def _crossed(render: R.Rendered, rng: random.Random) -> np.ndarray:
    """The page with a black 3 px line from top to bottom through one digit of the zone's expiry date."""
    img = render.image.convert("RGB").copy()
    x = H._through_expiry(render, rng)
    ImageDraw.Draw(img).line((x, 0, x, img.height), fill=(20, 20, 20), width=3)
    return np.asarray(img)


@pytest.mark.parametrize("seed", [305, 323])
def test_a_line_across_the_zone_is_painted_out_and_the_zone_read(seed):
    """The first pass reads the line as a letter on the name line (`MA JIANSI K`), or the zone not at all;
    with the line painted out of the strips the zone reads with every check passing and every field right."""
    rng = random.Random(seed)
    render = R.id_card_td1(random_mrz_person(rng, "id_card"))
    reading, _ = read_page(_crossed(render, rng), TODAY, try_flipped=False)
    assert {"mrz.number", "mrz.expiry"} <= set(reading.checks)
    assert (reading.fields["id_number"], reading.fields["expiry_date"], reading.fields["name"]) == (
        render.id_number, render.expiry_date, render.name)


def test_only_lines_from_edge_to_edge_of_a_strip_are_rules():
    """Print never reaches a strip's margins: a character's stem is no rule, a line through the whole strip
    is, and the mask covers that line's columns alone."""
    strip = np.full((mrz_reread.ROW_HEIGHT, 400), 240, np.uint8)
    strip[14:50, 40:46] = 20  # a stem of "1": the text rows only
    strip[14:50, 100:130:4] = 20  # more strokes
    strip[:, 200:203] = 20  # a crosshair's line
    mask = mrz_reread.vertical_rules(strip)
    columns = np.flatnonzero(mask.any(axis=0))
    assert columns.min() >= 199 and columns.max() <= 203
    strip[:, 200:203] = 240
    assert not mrz_reread.vertical_rules(strip).any()


# ------------------------------------------------------------------------------------------ synth conditions


def test_zone_rot90_keeps_the_page_upright_and_turns_only_its_zone():
    render = _passport(36)
    line_h = render.mrz_boxes[0][3] - render.mrz_boxes[0][1]
    cut = render.mrz_boxes[0][1] - round(0.8 * line_h)
    for degrees in (90, 270):
        out = H.zone_beside(render, degrees, 0.8, 20)
        assert out.width > out.height  # a landscape page stays landscape, as the ground truth says
        page = np.asarray(out)[:cut, :render.image.width]
        assert (page == np.asarray(render.image.convert("RGB"))[:cut]).all()
        ink = np.asarray(out.convert("L"))[:, render.image.width + 20:] < 100
        # the zone's lines now run down the page: ink over most of its height, in a few narrow columns
        assert ink.any(axis=1).mean() > 0.6 and ink.any(axis=0).mean() < 0.5
    seen = {H.zone_rot90(render, random.Random(s)).size for s in range(6)}
    assert len(seen) > 1


def test_crosshair_draws_lines_across_the_zone():
    render = _passport(37)
    base = np.asarray(render.image.convert("RGB"), np.int16)
    x0, y0, x1, y1 = H._mrz_band(render)
    through_expiry = 0
    for seed in range(8):
        out = np.asarray(H.crosshair(render, random.Random(seed)), np.int16)
        changed = np.abs(out - base).max(axis=2) > 60
        cols = np.flatnonzero(changed.mean(axis=0) > 0.9)  # the vertical line runs from top to bottom
        rows = np.flatnonzero(changed.mean(axis=1) > 0.9)
        assert len(cols) and len(rows)
        assert x0 - 1 <= cols.mean() <= x1 + 1 and y0 <= rows.mean() <= y1
        left, _, right, _ = render.mrz_boxes[1]
        char_w = (right - left) / len(render.mrz[1])
        through_expiry += left + 21 * char_w <= cols.mean() <= left + 27 * char_w
    assert 0 < through_expiry < 8
