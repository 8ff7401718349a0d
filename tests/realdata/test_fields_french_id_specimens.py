"""French national ID card 1988-2021 (2x36 zone): the upstream vectors, the real specimen's zone, and whole
real specimen pages read by RapidOCR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats.document import read_document
from pipeline.formats import french_id
from tests.unit.test_fields_french_id import TODAY


@pytest.fixture(scope="module")
def vectors(realdata_dir: Path) -> list[dict]:
    data = json.loads((realdata_dir / "mrz_test_vectors" / "mrz_vectors.json").read_text())
    return [c for c in data["cheminfo_mrz"] if "frenchNationalId" in c["file"]]


@pytest.fixture(scope="module")
def specimen(realdata_dir: Path) -> dict:
    manifest = json.loads((realdata_dir / "pyimagesearch_mrz_scans_developer79433" / "manifest.json").read_text())
    return next(x for x in manifest["items"] if x["doc_type"] == "FRA_ID_1988")


def test_cheminfo_vectors(vectors: list[dict]) -> None:
    assert len(vectors) == 4
    for case in vectors:
        if "autocorrect_input" in case:  # OCR-style damage (1/I, 5/S, 8/B, 2/Z) must read as the clean zone
            clean = french_id.parse(case["input"], TODAY)
            assert french_id.find(case["autocorrect_input"], TODAY) == clean
            continue
        r = french_id.parse(case["input"], TODAY)
        exp = case["expected_fields"]
        if not case["expected_valid"]:  # a '?' in the number: not zone text at all, so nothing is read
            assert r is None
            continue
        assert r is not None and r.valid
        assert r.number == case["expected_documentNumber_summary"]
        assert (r.surname, r.given_names) == (exp["lastName"], exp["firstName"])
        assert r.issued == exp["issueDate"]
        assert r.birth_date.strftime("%y%m%d") == exp["birthDate"]
        assert r.sex == {"female": "F", "male": "M"}[exp["sex"]]


def test_real_specimen_zone(specimen: dict) -> None:
    truth = specimen["ground_truth"]
    r = french_id.parse(truth["mrz"], TODAY)
    assert r is not None
    assert r.number == truth["document_number"] == specimen["id_number"]
    assert r.name == truth["name"]
    assert r.birth_date.strftime("%y%m%d") == truth["birth_date_yymmdd"]
    assert r.issued == truth["issue_yymm"]
    digits = {"number": "mrz.number", "birth": "mrz.birth", "composite": "mrz.composite"}
    assert {digits[k] for k, ok in truth["check_digits"].items() if ok} == set(r.checks_passed)
    assert r.expiry_date is None  # the zone has none; the back prints it


@pytest.fixture(scope="module")
def ocr():
    from rapidocr import RapidOCR

    return RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False})


@pytest.mark.parametrize("rel_path", ["pyimagesearch_mrz_scans_developer79433/images/examples/passport_02.jpg",
                                      "pyimagesearch_mrz_scans_developer79433/images/test_data/mrz_example_02.jpg"])
def test_real_specimen_page_with_rapidocr(realdata_dir: Path, ocr, rel_path: str) -> None:
    from pipeline.formats.document import OcrLine

    truth = next(x for x in json.loads((realdata_dir / "eval_manifest.json").read_text()) if x["path"] == rel_path)
    result = ocr(str(realdata_dir / rel_path))
    lines = [OcrLine(t, float(s), tuple(tuple(map(float, p)) for p in b))
             for t, s, b in zip(result.txts, result.scores, result.boxes)]
    r = read_document(lines, TODAY)
    assert r.doc_type == "id_card"
    assert r.fields == {"name": truth["name"], "id_number": truth["id_number"], "expiry_date": truth["expiry_date"]}
    assert {"mrz.number", "mrz.birth", "mrz.composite"} <= set(r.checks) and not r.check_failures
