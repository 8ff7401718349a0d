"""Inputs for the review tests: files of data/sample and blurred copies of its pages that the OCR reads with low
confidence (or not at all), made on the fly from the samples (nothing new stored in the repository)."""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image, ImageFilter

REPO = Path(__file__).resolve().parent.parent.parent
SAMPLE = REPO / "data" / "sample"

# (sample, Gaussian blur radius): measured with the ocr backend; name unreadable / fields under 0.95 / nothing
# found (a validate failure). The two-sided card needs radius 8 since recognition crops come from the
# full-resolution page: at 5 its ID number is read (and passes its checksum). The passport needs radius 5: up to
# 4.5 its zone name is read right and its two zone readers agree, so it is auto-accepted; at 5 the name is
# unreadable and its number and expiry are read (a record for a person to complete).
BLURRED = {"cn_front.jpg": 4, "passport_td3.jpg": 5, "visa_mrva.jpg": 4, "cn_both_sides.jpg": 8}


def blurred_copy(name: str, radius: int, folder: Path) -> Path:
    target = folder / f"blurred_{Path(name).stem}.jpg"
    Image.open(SAMPLE / name).convert("RGB").filter(ImageFilter.GaussianBlur(radius)).save(target, quality=85)
    return target


def review_inputs(folder: Path, *, sample: tuple[str, ...] = (), blurred: dict[str, int] | None = None) -> Path:
    """`folder` filled with the named files of the sample and the blurred copies; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in sample:
        shutil.copy(SAMPLE / name, folder / name)
    for name, radius in (BLURRED if blurred is None else blurred).items():
        blurred_copy(name, radius, folder)
    return folder
