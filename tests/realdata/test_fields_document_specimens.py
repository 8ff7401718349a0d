"""The embedded reader (`page_read.read_lines`: RapidOCR's stages as a run uses them, then `read_document`) on real
specimens from realdata."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from pipeline.extract.ocr import page_read
from tests.unit.test_fields_document import TODAY

SPECIMENS = [
    "arg0s1080_mrz_specimens/images/passports/Canada.png",
    "arg0s1080_mrz_specimens/images/id_cards/Latvia.png",
    "arg0s1080_mrz_specimens/images/visas/Germany.png",
    "cn_resident_id_synthetic/images/bzsome_result_color_front_back.png",
    "cn_resident_id_synthetic/images/ybc_idcard_ocr_test_front.jpg",
]


@pytest.mark.parametrize("rel_path", SPECIMENS)
def test_real_specimens_read_by_the_embedded_reader(realdata_dir: Path, rel_path: str) -> None:
    truth = next(x for x in json.loads((realdata_dir / "eval_manifest.json").read_text()) if x["path"] == rel_path)
    pixels = np.asarray(ImageOps.exif_transpose(Image.open(realdata_dir / rel_path)).convert("RGB"))
    _, reading = page_read.read_lines(pixels, TODAY)
    assert reading.fields["name"].casefold() == truth["name"].casefold()
    assert reading.fields["id_number"] == truth["id_number"]
    assert reading.fields["expiry_date"] == truth["expiry_date"]
