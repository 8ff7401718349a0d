"""EU / ISO 18013 driving licence zone against the upstream vectors in realdata/mrz_test_vectors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.formats import driving_licence
from tests.unit.test_fields_driving_licence import TODAY


@pytest.fixture(scope="module")
def vectors(realdata_dir: Path) -> list[dict]:
    data = json.loads((realdata_dir / "mrz_test_vectors" / "mrz_vectors.json").read_text())
    return [c for c in data["cheminfo_mrz"] if "frenchDrivingLicense" in c["file"]]


def test_cheminfo_vectors(vectors: list[dict]) -> None:
    assert len(vectors) == 2
    for case in vectors:
        r = driving_licence.parse(case["input"][0], TODAY)
        assert r is not None and r.valid
        if "autocorrect_input" in case:  # 8 read as B in the date, I as 1 in the name
            assert driving_licence.find(case["autocorrect_input"], TODAY) == r
            continue
        exp = case["expected_fields"]
        assert (r.number, r.surname, r.country) == (exp["documentNumber"], exp["lastName"], exp["issuingState"])
        assert r.expiry_date.strftime("%y%m%d") == exp["expirationDate"]
        assert r.checks_passed == ["mrz.number", "mrz.composite"]
