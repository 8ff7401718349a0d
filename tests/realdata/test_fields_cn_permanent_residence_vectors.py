"""PRC Foreign Permanent Resident ID Card numbers: no PRC resident ID number of the published vectors in
realdata/cn_id_number_vectors passes as one."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.formats import cn_permanent_residence as pr
from tests.unit.test_fields_cn_permanent_residence import TODAY


def test_resident_id_vectors_are_not_permanent_residence_numbers(realdata_dir: Path) -> None:
    data = json.loads((realdata_dir / "cn_id_number_vectors" / "cn_id_vectors.json").read_text())
    numbers = {v["id_number"] for v in data["vectors"] if isinstance(v.get("id_number"), str)}
    assert len(numbers) > 50 and not any(pr.is_valid_number(n, today=TODAY) for n in numbers)
