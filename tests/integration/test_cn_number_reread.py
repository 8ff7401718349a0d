"""The PRC number's second reading (pipeline/extract/ocr/cn_number_reread.py) on generated thumbnail photos of a
portrait side (300 px long edge, the card ~6 px digits), with the real RapidOCR models.

The generated pages' numbers are read right by the first pass, so the first pass's failure is made the way it
happens on a small capture: one digit of its number box misread, which fails the MOD 11-2 check character.
The re-read then works from the pixels only.
"""

from __future__ import annotations

import random
from datetime import date

import cv2
import numpy as np
import pytest

from pipeline.extract.ocr import cn_number_reread, page_read
from pipeline.extract.ocr.backend import recognise_line
from pipeline.formats.document import OcrLine, read_document
from pipeline.formats import cn_id
from synth import conditions as C
from synth import render as R
from synth.identities import random_cn_person

TODAY = date(2026, 11, 30)


def _thumbnail(seed: int) -> tuple[np.ndarray, str]:
    rng = random.Random(seed)
    r = R.cn_front(random_cn_person(rng))
    img = C.small(C.photo(r.image, rng), rng, long_edge=300)
    return np.ascontiguousarray(np.asarray(img.convert("RGB"))), r.id_number


def _misread_digit(lines: list[OcrLine], number: str) -> list[OcrLine]:
    """The first pass's lines with one digit of the number's box read wrong (the check character then fails)."""
    out = []
    for x in lines:
        if number in x.text:
            i = x.text.index(number) + 9
            wrong = next(d for d in "0123456789" if d != x.text[i] and
                         not cn_id.is_valid_number(number[:9] + d + number[10:], today=TODAY))
            x = OcrLine(x.text[:i] + wrong + x.text[i + 1:], x.score, x.box)
        out.append(x)
    assert out != lines, "the first pass did not read the number's box"
    return out


def _turned(lines: list[OcrLine], width: int, height: int) -> list[OcrLine]:
    """The same boxes on the page turned 180°, corners in the order a detector gives them (top-left first)."""
    def m(p: tuple[float, float]) -> tuple[float, float]:
        return width - p[0], height - p[1]
    return [OcrLine(x.text, x.score, (m(x.box[2]), m(x.box[3]), m(x.box[0]), m(x.box[1]))) for x in lines]


@pytest.mark.parametrize("seed", [0, 2])
def test_a_misread_number_on_a_thumbnail_is_recovered(seed: int) -> None:
    pixels, number = _thumbnail(seed)
    lines = _misread_digit(page_read.read_lines(pixels, TODAY)[0], number)
    first = read_document(lines, TODAY)
    assert cn_number_reread.needed(first) and first.fields["id_number"] is None
    again = cn_number_reread.second_reading(pixels, lines, first, TODAY, recognise_line, both_ways=False)
    assert again.fields["id_number"] == number
    assert "cn_id.checksum" in again.checks and not again.check_failures


def test_an_upside_down_number_line_is_read_turned_when_the_direction_was_unsure() -> None:
    """The page as the first pass saw it, upside down, with its boxes where they are on that page: the cut
    line is upside down too, and only its 180° turn reads."""
    pixels, number = _thumbnail(1)
    lines = _misread_digit(page_read.read_lines(pixels, TODAY)[0], number)
    first = read_document(lines, TODAY)
    h, w = pixels.shape[:2]
    upside_down, turned_lines = np.ascontiguousarray(pixels[::-1, ::-1]), _turned(lines, w, h)
    sure = cn_number_reread.second_reading(upside_down, turned_lines, first, TODAY, recognise_line, both_ways=False)
    assert sure.fields["id_number"] is None
    unsure = cn_number_reread.second_reading(upside_down, turned_lines, first, TODAY, recognise_line, both_ways=True)
    assert unsure.fields["id_number"] == number


def test_a_number_line_that_cannot_be_read_stays_unreadable() -> None:
    """The number's digits painted over (a finger, a sticker): no re-read passes the checksum, nothing is
    stored."""
    pixels, number = _thumbnail(0)
    lines = _misread_digit(page_read.read_lines(pixels, TODAY)[0], number)
    box = next(x for x in lines if cn_number_reread._is_number_shaped(x.text))
    covered = pixels.copy()
    cv2.rectangle(covered, (int(box.left) + int(0.3 * (box.right - box.left)), int(box.top) - 2),
                  (int(box.right) + 2, int(box.bottom) + 2), (235, 232, 228), thickness=-1)
    first = read_document(lines, TODAY)
    again = cn_number_reread.second_reading(covered, lines, first, TODAY, recognise_line, both_ways=True)
    assert again.fields["id_number"] is None and again.states["id_number"].state == "unreadable"
    assert again is first
