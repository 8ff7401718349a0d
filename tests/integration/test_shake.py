"""Camera shake on a field read by recognition alone (pipeline/extract/ocr/shake.py): generated PRC fronts,
sharp, shaken and dark, read by the real RapidOCR models; the name's evidence class tells the shaken one apart.
"""

from __future__ import annotations

import random
from datetime import date

import cv2
import numpy as np
import pytest

from pipeline.extract.ocr import shake
from pipeline.extract.ocr.backend import read_page
from pipeline.formats.document_format import SHARP_CHECK
from pipeline.trust.table import evidence_class
from synth import hard as H
from synth import render as R
from synth.identities import random_cn_person, random_mrz_person

TODAY = date(2026, 11, 30)


def _rgb(img) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(img.convert("RGB")))


def _shaken(pixels: np.ndarray, length: int, degrees: float) -> np.ndarray:
    """A straight smear of `length` px at `degrees`, as a shaking hand makes."""
    kernel = np.zeros((length, length), np.float32)
    kernel[length // 2, :] = 1.0
    m = cv2.getRotationMatrix2D((length / 2 - 0.5, length / 2 - 0.5), degrees, 1.0)
    kernel = cv2.warpAffine(kernel, m, (length, length))
    return cv2.filter2D(pixels, -1, kernel / kernel.sum())


@pytest.fixture(scope="module")
def card():
    return R.cn_front(random_cn_person(random.Random(11)))


def _name_class(pixels: np.ndarray) -> tuple[str, list[str], list[str]]:
    reading, _ = read_page(pixels, TODAY, try_flipped=False)
    assert reading.states["name"].state == "present", "the name was not read at all"
    return (evidence_class("name", reading.doc_type, reading.checks, reading.check_failures),
            reading.checks, reading.check_failures)


def test_a_sharp_name_is_in_its_class_and_a_shaken_one_in_another(card) -> None:
    sharp = _rgb(card.image)
    cls, checks, failures = _name_class(sharp)
    assert cls == "name/cn.passed" and SHARP_CHECK in checks and SHARP_CHECK not in failures
    for degrees in (0, 35, 90):  # an 8 px smear on an 856 px card: the name still read, its number maybe not
        cls, checks, failures = _name_class(_shaken(sharp, 8, degrees))
        assert cls.startswith("name/cn.") and cls.endswith("_shaken"), degrees
        assert SHARP_CHECK in failures and SHARP_CHECK not in checks


def test_a_dark_noisy_photo_keeps_its_spread(card) -> None:
    """Darkness, noise and a phone's perspective lower contrast, not the spread of edge directions."""
    dark = _rgb(H.dark_phone(card, random.Random(5)))
    cls, checks, _ = _name_class(dark)
    assert cls == "name/cn.passed" and SHARP_CHECK in checks


def test_spread_falls_as_the_smear_lengthens(card) -> None:
    pixels = _rgb(card.image)
    reading, _ = read_page(pixels, TODAY, try_flipped=False)
    from pipeline.extract.ocr import page_read

    lines, _ = page_read.read_lines(pixels, TODAY)
    box = shake.box_of(lines, reading.fields["name"])
    assert box is not None
    spreads = [shake.spread(_shaken(pixels, n, 20) if n else pixels, box.box) for n in (0, 5, 9, 15)]
    assert spreads[0] >= shake.SHAKEN > spreads[-1]
    assert spreads == sorted(spreads, reverse=True)


def test_a_zone_name_is_not_measured() -> None:
    """A passport's name has the zone and the printed zone behind it: no field of its format is read alone."""
    r = R.passport_td3(random_mrz_person(random.Random(4), "passport"))
    reading, _ = read_page(_rgb(r.image), TODAY, try_flipped=False)
    assert not shake.wanted(reading)
    assert SHARP_CHECK not in reading.checks + reading.check_failures


def test_box_of_finds_the_box_a_value_came_from() -> None:
    from pipeline.formats.lines import OcrLine

    box = ((0.0, 0.0), (10.0, 0.0), (10.0, 5.0), (0.0, 5.0))
    lines = [OcrLine("姓名张三丰", 0.9, box), OcrLine("张三", 0.9, box), OcrLine("性别男", 0.9, box)]
    assert shake.box_of(lines, "张三").text == "张三"  # the tightest box holding it
    assert shake.box_of(lines, "张三峰").text == "姓名张三丰"  # a value a second reading changed
    assert shake.box_of(lines, "李四") is None
