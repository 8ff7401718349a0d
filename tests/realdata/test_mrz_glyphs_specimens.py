"""The zone name's second reader (`mrz_glyphs`) on the real specimens: agreeing with the first reader means the
name is right.

Every specimen of the shared set whose first reading decodes a zone name is asked, whether or not its printed zone
confirms the name (more names than the embedded path asks about, so the rule is tested on as many as there are):
the glyph reader must never read the same name as the first reader where that name is wrong. How many it
confirms, contradicts and cannot cut into cells is printed (`-s`); the real set measures, it is never tuned on.
"""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageOps

from pipeline.extract.ocr import mrz_glyphs, page_read
from pipeline.formats.lines import fold

TODAY = date(2026, 1, 1)


def _zone_name(reading) -> str | None:
    """The reading's name when it is a zone's own (a zone decoded, and its name read from the zone)."""
    name = reading.fields.get("name")
    zone = any(c.startswith("mrz.") for c in reading.checks)
    return name if zone and name and reading.format == "icao_mrz" else None


OWN_ZONES = {"FRA_ID_1988"}  # the 1988-2021 French card's 2x36 zone is not an ICAO zone
PARTS = 4  # the specimens are read in four tests of ~30 s each rather than one of two minutes


def verdicts(realdata_dir: Path, part: int) -> list[tuple[str, bool | None, bool]]:
    """Per specimen with a zone name (every PARTS-th from `part`): its path, the second reader's verdict and
    whether the name is right."""
    out = []
    for item in json.loads((realdata_dir / "eval_manifest.json").read_text())[part::PARTS]:
        if not item.get("name") or item["doc_type"] == "cn_id" or item["doc_type"] in OWN_ZONES:
            continue  # no zone, or a zone of its own: never an ICAO zone name (`_zone_name`), so not read
        image = ImageOps.exif_transpose(Image.open(realdata_dir / item["path"])).convert("RGB")
        pixels = np.asarray(image)
        lines, reading = page_read.read_lines(pixels, TODAY)
        name = _zone_name(reading)
        if name is None:
            continue
        right = fold(name).split() == fold(item["name"]).split()
        out.append((item["path"], mrz_glyphs.name_agrees(pixels, lines, name), right))
    return out


@pytest.mark.parametrize("part", range(PARTS))
def test_the_second_reader_never_agrees_on_a_wrong_zone_name(realdata_dir: Path, part: int) -> None:
    seen = verdicts(realdata_dir, part)
    agreed_wrong = [path for path, verdict, right in seen if verdict is True and not right]
    confirmed = sum(verdict is True for _, verdict, _ in seen)
    contradicted = [(path, right) for path, verdict, right in seen if verdict is False]
    unread = sum(verdict is None for _, verdict, _ in seen)
    print(f"\nzone names read: {len(seen)}; confirmed by the second reader {confirmed}, contradicted "
          f"{len(contradicted)} (first reader right on {sum(r for _, r in contradicted)} of them), not cut into "
          f"cells {unread}")
    assert seen, "no zone name in this part: the test would prove nothing"
    assert not agreed_wrong
    assert confirmed >= len(seen) // 3  # the second reader reads real zones, not only rendered ones
