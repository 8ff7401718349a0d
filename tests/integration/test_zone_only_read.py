"""Zone-only images (the `mrz_strip` condition: a document cropped to its MRZ) read by the real OCR models."""

from __future__ import annotations

import random
from datetime import date

import numpy as np
import pytest

from pipeline.extract.ocr import zone_only
from pipeline.extract.ocr.backend import read_page
from pipeline.prepare.orient import make_upright
from synth import hard as H
from synth import render as R
from synth.identities import random_mrz_person

TODAY = date(2026, 12, 4)


@pytest.mark.parametrize(("kind", "seed"), [("passport", 11), ("td1", 12), ("td2", 13)])
def test_a_cut_out_zone_is_read_as_a_zone(kind: str, seed: int) -> None:
    rng = random.Random(seed)
    person = random_mrz_person(rng, "passport" if kind == "passport" else "id_card")
    rendered = {"passport": R.passport_td3, "td1": R.id_card_td1, "td2": R.id_card_td2}[kind](person)
    strip = np.asarray(H.mrz_strip(rendered, rng).convert("RGB"))
    upright, found = make_upright(strip)
    assert zone_only.prepared(upright) is not None
    reading, _ = read_page(upright, TODAY, try_flipped=found.confidence < 0.88)
    assert reading.fields == {"name": H.zone_name(rendered.mrz), "id_number": rendered.id_number,
                              "expiry_date": rendered.expiry_date}
    assert "mrz.number" in reading.checks
