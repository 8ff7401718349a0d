"""PRC resident ID numbers against the published vectors in realdata/cn_id_number_vectors."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from pipeline.formats import cn_id
from tests.unit.test_fields_cn_id import TODAY

# Vectors not asserted, by rule, with the reason:
# - strict_mode=True: "birth date before the region code was created" needs the historical county-code
#   tables; is_valid_number implements the non-strict mode (the same numbers are asserted valid there).
# - kind=birth_place: county names and their registration history are out of scope (province only).


@pytest.fixture(scope="module")
def vectors(realdata_dir: Path) -> list[dict]:
    data = json.loads((realdata_dir / "cn_id_number_vectors" / "cn_id_vectors.json").read_text())
    assert data["count"] == len(data["vectors"]) == 105
    return data["vectors"]


def test_validity_vectors(vectors: list[dict]) -> None:
    asserted = skipped = 0
    for v in vectors:
        kind = v.get("kind")
        if kind is not None and kind != "from_image_gt":
            continue
        if v.get("strict_mode") is True:
            skipped += 1
            continue
        number = v["id_number"]
        if v["expected_valid"] is None:  # printed on a fictional card, no upstream claim: checksum only
            assert cn_id.check_char(number[:17]) == number[17]
        else:
            assert cn_id.is_valid_number(number, today=TODAY) is v["expected_valid"], v
        asserted += 1
    assert asserted == 86 and skipped == 7


def test_info_vectors(vectors: list[dict]) -> None:
    infos = [v for v in vectors if "expected_info" in v]
    assert len(infos) == 9
    for v in infos:
        number, info = v["id_number"], v["expected_info"]
        assert cn_id.birth_date(number) == date.fromisoformat(info["birthdayCode"])
        assert cn_id.sex(number) == ("男" if info["sex"] == 1 else "女")
        if info["length"] == 18:
            assert cn_id.check_char(number[:17]) == info["checkBit"]


def test_birth_date_and_upgrade_vectors(vectors: list[dict]) -> None:
    for v in vectors:
        if v.get("kind") == "birth_date":
            y, m, d = map(int, v["expected"].removeprefix("datetime.date(").rstrip(")").split(","))
            assert cn_id.birth_date(v["id_number"]) == date(y, m, d)
        elif v.get("kind") == "upgrade_15_to_18":
            assert cn_id.upgrade_15(v["input"]) == v["expected_output"]
        elif v.get("kind") == "birth_place":
            continue  # out of scope, see the module note
