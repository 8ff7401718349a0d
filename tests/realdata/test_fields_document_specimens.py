"""read_document on real specimens from realdata, read by RapidOCR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats.document import OcrLine, read_document
from tests.unit.test_fields_document import TODAY

SPECIMENS = [
    "arg0s1080_mrz_specimens/images/passports/Canada.png",
    "arg0s1080_mrz_specimens/images/id_cards/Latvia.png",
    "arg0s1080_mrz_specimens/images/visas/Germany.png",
    "cn_resident_id_synthetic/images/bzsome_result_color_front_back.png",
    "cn_resident_id_synthetic/images/ybc_idcard_ocr_test_front.jpg",
]


@pytest.fixture(scope="module")
def ocr():
    from rapidocr import RapidOCR

    return RapidOCR()


@pytest.mark.parametrize("rel_path", SPECIMENS)
def test_real_specimens_with_rapidocr(realdata_dir: Path, ocr, rel_path: str) -> None:
    truth = next(x for x in json.loads((realdata_dir / "eval_manifest.json").read_text()) if x["path"] == rel_path)
    result = ocr(str(realdata_dir / rel_path))
    lines = [OcrLine(t, float(s), tuple(tuple(map(float, p)) for p in b))
             for t, s, b in zip(result.txts, result.scores, result.boxes)]
    reading = read_document(lines, TODAY)
    assert reading.fields["name"].casefold() == truth["name"].casefold()
    assert reading.fields["id_number"] == truth["id_number"]
    assert reading.fields["expiry_date"] == truth["expiry_date"]
