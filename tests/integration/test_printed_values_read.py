"""Printed values with marks and field numbers round them (`render.id_card_td1(marks=True)`: `1. „SURNAME“`,
`2. GIVEN NAMES`), read by the real OCR models: what is stored is the name, not the print around it."""

from __future__ import annotations

import random
from datetime import date

import numpy as np

from pipeline.extract.ocr.backend import read_page
from synth import render as R
from synth.identities import random_mrz_person

TODAY = date(2026, 12, 4)


def test_a_card_front_without_its_zone_stores_the_name_without_marks_or_field_numbers() -> None:
    rendered = R.id_card_td1(random_mrz_person(random.Random(21), "id_card"), marks=True)
    zone_top = min(box[1] for box in rendered.mrz_boxes)
    front = np.asarray(rendered.image.convert("RGB").crop((0, 0, rendered.image.width, zone_top - 30)))
    reading, _ = read_page(front, TODAY, try_flipped=False)
    assert reading.format == "printed"
    assert reading.fields == {"name": rendered.name, "id_number": rendered.id_number,
                              "expiry_date": rendered.expiry_date}
