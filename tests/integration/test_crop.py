"""Cropping a large page to the document on it (flatbed scans with the card in a corner), on generated images."""

from __future__ import annotations

import random
from datetime import date
from pathlib import Path

import numpy as np
import pytest

from pipeline.datamodel import DocumentRef, PreparedImage
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.prepare.crop import find_document
from pipeline.settings import PrepareSettings
from synth import conditions as C
from synth import render as R
from synth.identities import random_cn_person, random_mrz_person

TODAY = date(2026, 1, 1)


def _td1(seed: int) -> R.Rendered:
    return R.id_card_td1(random_mrz_person(random.Random(seed), kind="id_card"))


def _content_box(page: np.ndarray) -> tuple[int, int, int, int]:
    """Box around every pixel clearly unlike the flatbed's paper (the generator's page colour)."""
    ys, xs = np.nonzero(np.abs(page.astype(np.int16) - (250, 250, 247)).max(axis=2) > 40)
    return xs.min(), ys.min(), xs.max() + 1, ys.max() + 1


@pytest.mark.parametrize("seed", range(6))  # the generator picks the corner from the seed
def test_flatbed_card_is_found_whole(seed: int) -> None:
    page = np.asarray(C.flatbed(_td1(seed).image, random.Random(seed)))
    box = find_document(page)
    assert box is not None
    x0, y0, x1, y1 = box
    cx0, cy0, cx1, cy1 = _content_box(page)
    assert x0 <= cx0 and y0 <= cy0 and x1 >= cx1 and y1 >= cy1  # nothing of the card is cut off
    h, w = page.shape[:2]
    assert (x1 - x0) * (y1 - y0) < 0.3 * w * h  # ... and the empty page is
    assert (x1 - x0) < 1.3 * (cx1 - cx0) and (y1 - y0) < 1.3 * (cy1 - cy0)  # only a margin around it


def test_rotated_card_on_flatbed_is_kept_whole() -> None:
    card = C.rotate(R.cn_front(random_cn_person(random.Random(3))).image, 90)
    page = np.asarray(C.flatbed(card, random.Random(3)))
    box = find_document(page)
    assert box is not None
    cx0, cy0, cx1, cy1 = _content_box(page)
    x0, y0, x1, y1 = box
    assert x0 <= cx0 and y0 <= cy0 and x1 >= cx1 and y1 >= cy1


def test_full_page_document_and_blank_page_are_left_alone() -> None:
    card = np.asarray(_td1(1).image)
    assert find_document(card) is None  # a card filling its image
    full_page = np.asarray(C.flatbed(_td1(4).image.resize((2000, 2828)), random.Random(4)))  # A4 document
    box = find_document(full_page)
    assert box is None
    blank = np.full((4000, 2828, 3), 250, np.uint8)
    assert find_document(blank) is None


def test_prepare_page_keeps_the_flatbed_card_at_scan_resolution(tmp_path: Path) -> None:
    rendered = _td1(11)
    page = C.flatbed(rendered.image, random.Random(11))
    path = tmp_path / "flatbed.jpg"
    page.save(path, quality=92)
    prepared = prepare_page(DocumentRef(path, path.name, sha256_file(path)), PrepareSettings())
    assert isinstance(prepared, PreparedImage)
    assert prepared.original_size == page.size
    card_w = rendered.image.width * C._FLATBED_SCALE
    full = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
    assert max(full.shape[:2]) >= 0.9 * card_w  # the card, not the page, fills the OCR's image
    assert max(prepared.pixels.shape[:2]) <= PrepareSettings().max_long_edge

    from pipeline.extract.ocr.backend import read_page

    reading, _ = read_page(full, TODAY)
    assert reading.fields["id_number"] == rendered.id_number
    assert reading.fields["expiry_date"] == rendered.expiry_date


def test_small_pages_are_not_cropped(tmp_path: Path) -> None:
    """Pages no larger than the working size are never cropped: there is no resolution to win back."""
    page = C.small(C.flatbed(_td1(5).image, random.Random(5)), random.Random(5), long_edge=2000)
    path = tmp_path / "page.png"
    page.save(path)
    prepared = prepare_page(DocumentRef(path, path.name, sha256_file(path)), PrepareSettings())
    assert isinstance(prepared, PreparedImage)
    full = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
    assert max(full.shape[:2]) >= 1990  # the whole page
