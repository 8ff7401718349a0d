"""The MRZ second reading (pipeline/extract/ocr/mrz_reread.py) on generated pages whose MRZ position is known.

Geometry tests need no OCR (they compare found rows with the renderer's own MRZ line boxes); the end-to-end
tests run the real RapidOCR models on pages where the first pass alone does not decode the MRZ.
"""

from __future__ import annotations

import random
from datetime import date

import numpy as np
import pytest
from PIL import Image, ImageDraw

from pipeline.extract.ocr import mrz_reread
from pipeline.extract.ocr.backend import needs_second_reading, read_page
from pipeline.formats.document import OcrLine, read_document
from synth import hard as H
from synth import render as R
from synth.identities import random_mrz_person

TODAY = date(2026, 11, 30)


def _passport(seed: int) -> R.Rendered:
    return R.passport_td3(random_mrz_person(random.Random(seed), "passport"))


def _visa(seed: int) -> R.Rendered:
    return R.visa_mrva(random_mrz_person(random.Random(seed), "visa"))


def _centre(box: tuple[int, int, int, int]) -> tuple[float, float]:
    return (box[0] + box[2]) / 2, (box[1] + box[3]) / 2


@pytest.mark.parametrize("text,expected", [
    ("P<UTOERIKSSON<<ANNA<MARIA<<<<<<", True),
    ("L898902C36UTO7408122F1204159ZE184226B", True),   # data line with fillers read as letters
    ("REPUBLIC OF UTOPIA PASSPORT", False),          # a heading: long, upper case, no digits
    ("Date of expiry", False),
])
def test_mrz_like_boxes(text, expected):
    assert mrz_reread.is_mrz_like(text) is expected


def _box(left: float, top: float, right: float, bottom: float) -> tuple[tuple[float, float], ...]:
    return ((left, top), (right, top), (right, bottom), (left, bottom))


def test_a_first_pass_fragment_of_a_reread_line_is_dropped_with_it():
    """The first pass read only `CAN` off the name line (an occluder across it); the re-read line is
    `P<CANJANSEN<<CLARA<` with its closing fillers lost. Left in, the fragment joins the re-read line's row as a
    fourth name word that the printed nationality `CAN` even seems to confirm."""
    printed = [OcrLine("Surname / Nom", 0.98, _box(380, 200, 560, 220)),
               OcrLine("JANSEN", 1.0, _box(380, 225, 480, 250)),
               OcrLine("Given names / Prénoms", 0.99, _box(380, 260, 640, 280)),
               OcrLine("CLARA", 1.0, _box(380, 285, 470, 310)),
               OcrLine("Nationality / Nationalité", 0.98, _box(380, 320, 650, 340)),
               OcrLine("CAN", 1.0, _box(380, 345, 440, 370))]
    fragment = OcrLine("CAN", 0.99, _box(138, 707, 241, 724))
    reread = [OcrLine("P<CANJANSEN<<CLARA<", 0.9, _box(23, 707, 1250, 738)),
              OcrLine("ZE16687278CAN9910078M2312178<<<<<<<<<<<<<<<4", 0.95, _box(23, 776, 1250, 811))]
    lines = mrz_reread.replace_mrz([*printed, fragment], reread)
    assert fragment not in lines and printed[-1] in lines
    assert read_document(lines, TODAY).fields["name"] == "JANSEN CLARA"


def test_rows_from_one_detected_line_include_the_missing_name_line():
    """Only the data line was detected (glare on the name line): the row above it is predicted and then
    snapped onto the ink of the real line."""
    r = _passport(3)
    x0, y0, x1, y1 = r.mrz_boxes[1]
    pad = 0.2 * (y1 - y0)  # detector boxes are a little taller than the glyphs
    box = ((x0, y0 - pad), (x1, y0 - pad), (x1, y1 + pad), (x0, y1 + pad))
    pixels = np.asarray(r.image)
    rows = [mrz_reread.refine(pixels, row) for row in mrz_reread.locate_rows([OcrLine(r.mrz[1], 0.9, box)])]
    name_y = _centre(r.mrz_boxes[0])[1]
    assert any(abs(row.cy - name_y) < 0.3 * (y1 - y0) for row in rows)


def test_shape_finds_mrz_lines_without_any_box():
    """With a box drawn across the zone the detector finds no MRZ line; the shape search still does."""
    r = _visa(5)
    img = r.image.copy()
    first, last = r.mrz_boxes
    ImageDraw.Draw(img).rectangle((first[0] - 20, (first[1] + first[3]) / 2, first[2] + 20, (last[1] + last[3]) / 2),
                                  outline=(30, 90, 220), width=4)
    pixels = np.asarray(img)
    rows = [mrz_reread.refine(pixels, mrz_reread.refine(pixels, x)) for x in mrz_reread.locate_rows_by_shape(pixels)]
    for box in r.mrz_boxes:
        _, cy = _centre(box)
        assert any(abs(row.cy - cy) < 0.3 * (box[3] - box[1]) and row.cx - row.half_width <= box[0] + 5
                   and row.cx + row.half_width >= box[2] - 5 for row in rows)


def test_refine_recentres_an_offset_row():
    r = _passport(8)
    pixels = np.asarray(r.image)
    box = r.mrz_boxes[1]
    cx, cy = _centre(box)
    height = box[3] - box[1]
    off = mrz_reread.Row(cx, cy - 0.45 * height, 0.0, height, (box[2] - box[0]) / 2 + 10)
    assert abs(mrz_reread.refine(pixels, off).cy - cy) < 0.2 * height


def test_drawn_box_across_the_mrz_is_read_by_the_second_reading():
    """End to end with the real models: the first pass finds no MRZ (a UI box runs through both lines);
    the second reading decodes it with passing check digits and every field right."""
    r = _visa(11)
    img = r.image.copy()
    first, last = r.mrz_boxes
    ImageDraw.Draw(img).rectangle((first[0] - 15, first[1] + 0.6 * (first[3] - first[1]), first[2] + 15,
                                   last[1] + 0.4 * (last[3] - last[1])), outline=(230, 40, 40), width=5)
    pixels = np.asarray(img)
    reading, _ = read_page(pixels, TODAY)
    assert {"mrz.number", "mrz.expiry"} <= set(reading.checks)
    assert reading.fields["id_number"] == r.id_number
    assert reading.fields["expiry_date"] == r.expiry_date
    assert reading.fields["name"] == r.name


def test_an_erased_name_line_is_left_to_the_data_line():
    """A line that cannot be read stays unread: the data line's fields come from its check digits, the
    name never from a guessed MRZ line (only, at low confidence, from the printed zone)."""
    r = _passport(21)
    img = r.image.copy()
    x0, y0, x1, y1 = r.mrz_boxes[0]
    ImageDraw.Draw(img).rectangle((x0 - 5, y0 - 5, x1 + 5, y1 + 5), fill=(252, 252, 250))
    reading, _ = read_page(np.asarray(img), TODAY)
    assert reading.fields["id_number"] == r.id_number
    assert reading.fields["expiry_date"] == r.expiry_date
    assert reading.fields["name"] in (None, r.name)
    if reading.fields["name"] is not None:
        assert reading.states["name"].confidence < 0.6


def test_second_reading_only_when_needed():
    """A clean page decodes fully on the first pass and is not re-read."""
    r = _passport(2)
    from pipeline.extract.ocr.backend import ocr_lines

    first = read_document(ocr_lines(np.asarray(r.image)), TODAY)
    assert first.fields["name"] == r.name
    assert not needs_second_reading(first)


def test_hard_conditions_keep_the_mrz_boxes_meaningful():
    """The hard set's MRZ-targeted conditions need the renderer's line boxes to frame the printed lines."""
    r = _passport(4)
    assert len(r.mrz_boxes) == 2
    for (x0, y0, x1, y1), line in zip(r.mrz_boxes, r.mrz):
        crop = np.asarray(r.image.convert("L").crop((x0, y0, x1, y1)))
        assert crop.min() < 60 and x1 - x0 > 20 * (y1 - y0) / 2
    out = H.occlusion(r, random.Random(1))
    assert isinstance(out, Image.Image) and out.size == r.image.size
