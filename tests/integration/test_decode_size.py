"""Decoding a page no larger than needed (JPEG DCT scaling, PDF at a lower dpi), on real files made here.

What must hold: a reduced decode is never smaller than asked; a flatbed card ends at the same size (and nearly
the same pixels) as when the whole page is decoded then cropped; EXIF turns still apply; `--dry-run`'s token
prediction still matches what is sent.
"""

from __future__ import annotations

import io
import math
import random
import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image, ImageFile

from pipeline.datamodel import DocumentRef, Failure, PreparedImage, Reason
from pipeline.ingest.containers import open_page, page_size
from pipeline.ingest.discover import Discovery, sha256_file
from pipeline.ops.estimate import estimate_folder
from pipeline.prepare import FULL_MAX_LONG_EDGE, _working_page, prepare_page
from pipeline.prepare.crop import find_document
from pipeline.prepare.load import VerifiedPage, load_page
from pipeline.prepare.orient import make_upright
from pipeline.prepare.resize import cap_long_edge, capped_size, fit_to_budget
from pipeline.settings import PrepareSettings, Settings
from synth import conditions as C
from synth import render as R
from synth.identities import random_mrz_person

SETTINGS = PrepareSettings()
VLM_EDGE = SETTINGS.max_long_edge  # working size of a VLM run (keep_full=False)
OCR_EDGE = max(FULL_MAX_LONG_EDGE, SETTINGS.max_long_edge)  # ... and of an embedded OCR run


def _ref(path: Path) -> DocumentRef:
    return DocumentRef(path, path.name, sha256_file(path))


def _card(seed: int) -> Image.Image:
    return R.id_card_td1(random_mrz_person(random.Random(seed), kind="id_card")).image


def _photo(path: Path, size: tuple[int, int] = (4000, 3000), **save: object) -> Path:
    """A phone-photo-like JPEG: a card filling most of the frame on a textured table."""
    rng = np.random.default_rng(7)
    table = rng.integers(90, 140, (size[1] // 8, size[0] // 8, 3), dtype=np.uint8)
    page = Image.fromarray(table).resize(size, Image.Resampling.BILINEAR)
    card = _card(3)
    card = card.resize((round(size[0] * 0.85), round(size[0] * 0.85 * card.height / card.width)))
    page.paste(card, ((size[0] - card.width) // 2, (size[1] - card.height) // 2))
    page.save(path, "JPEG", quality=90, **save)
    return path


def _flatbed(path: Path, seed: int = 11) -> Path:
    C.flatbed(_card(seed), random.Random(seed)).save(path, "JPEG", quality=92)
    return path


def _full_decode_working(ref: DocumentRef, working_edge: int) -> np.ndarray:
    """The working page as it was made before reduced decodes: full decode, crop, then cap."""
    full = load_page(ref, SETTINGS)
    box = find_document(full) if max(full.shape[:2]) > OCR_EDGE else None
    if box is not None:
        x0, y0, x1, y1 = box
        full = full[y0:y1, x0:x1]
    return cap_long_edge(full, working_edge)


# --- containers: open_page(min_size=...) -----------------------------------------------------------------

@pytest.mark.parametrize(("min_size", "expected"), [
    ((1600, 1200), (2000, 1500)),  # 4000 // 1600 = 2: half
    ((2000, 1500), (2000, 1500)),  # exactly half is enough
    ((2001, 1500), (4000, 3000)),  # one pixel more than half: full
    ((800, 600), (1000, 750)),  # quarter
    ((500, 375), (500, 375)),  # eighth, the smallest DCT scale
    ((10, 10), (500, 375)),  # never smaller than an eighth
    ((5000, 4000), (4000, 3000)),  # never larger than stored
])
def test_jpeg_decodes_at_the_largest_dct_scale_that_keeps_min_size(
        tmp_path: Path, min_size: tuple[int, int], expected: tuple[int, int]) -> None:
    path = _photo(tmp_path / "photo.jpg")
    page = open_page(path, 0, SETTINGS, min_size=min_size)
    assert page.size == expected
    assert page.size[0] >= min(min_size[0], 4000) and page.size[1] >= min(min_size[1], 3000)


def test_odd_jpeg_sizes_round_up(tmp_path: Path) -> None:
    path = _photo(tmp_path / "odd.jpg", size=(4001, 2999))
    assert open_page(path, 0, SETTINGS, min_size=(2000, 1499)).size == (2001, 1500)  # ceil(4001 / 2)


@pytest.mark.parametrize("progressive", [False, True])
def test_reduced_jpeg_matches_a_reduced_full_decode(tmp_path: Path, progressive: bool) -> None:
    path = _photo(tmp_path / "photo.jpg", progressive=progressive)
    half = np.asarray(open_page(path, 0, SETTINGS, min_size=(2000, 1500)), dtype=np.float32)
    full_halved = np.asarray(open_page(path, 0, SETTINGS).reduce(2), dtype=np.float32)
    assert half.shape == full_halved.shape
    assert np.abs(half - full_halved).mean() < 3  # same picture; DCT scaling filters a little differently


def test_exif_turned_jpeg_is_upright_when_reduced(tmp_path: Path) -> None:
    """Stored 4000x3000 with EXIF orientation 6 (shown turned 90 degrees clockwise): shown 3000x4000."""
    exif = Image.Exif()
    exif[0x0112] = 6
    path = _photo(tmp_path / "turned.jpg", exif=exif.tobytes())
    assert page_size(path, 0, SETTINGS) == (3000, 4000)
    full = open_page(path, 0, SETTINGS)
    assert full.size == (3000, 4000)
    half = open_page(path, 0, SETTINGS, min_size=(1200, 1600))  # asked as shown, not as stored
    assert half.size == (1500, 2000)
    diff = np.abs(np.asarray(half, np.float32) - np.asarray(full.reduce(2), np.float32)).mean()
    assert diff < 3  # the same upright picture, not a turned or mirrored one


def test_non_jpeg_formats_ignore_min_size(tmp_path: Path) -> None:
    path = tmp_path / "page.png"
    Image.open(_photo(tmp_path / "photo.jpg")).save(path)
    assert open_page(path, 0, SETTINGS, min_size=(500, 375)).size == (4000, 3000)


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + kind + payload + zlib.crc32(kind + payload).to_bytes(4, "big")


def _decodes_during(monkeypatch: pytest.MonkeyPatch, call: Callable[[], object]) -> int:
    """How many times pixel data is decoded while `call` runs, by Pillow or by OpenCV (which decodes the plain
    PNGs): spies that call through."""
    import cv2

    count = 0
    load, imdecode = ImageFile.ImageFile.load, cv2.imdecode

    def counting(self: ImageFile.ImageFile) -> object:
        nonlocal count
        count += self.tile != []  # a load with tiles left decodes; a repeated load is free
        return load(self)

    def counting_imdecode(*args: object) -> object:
        nonlocal count
        count += 1
        return imdecode(*args)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting)
    monkeypatch.setattr(cv2, "imdecode", counting_imdecode)
    call()
    return count


def test_png_size_is_read_from_the_header_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pillow decodes a whole PNG to look for EXIF after its pixel data; a PNG holding no EXIF is not decoded
    to learn its size (a page was decoded twice: once for its size, once for its pixels)."""
    path = tmp_path / "page.png"
    Image.open(_photo(tmp_path / "photo.jpg", size=(1200, 900))).save(path)
    assert _decodes_during(monkeypatch, lambda: page_size(path, 0, SETTINGS)) == 0
    assert page_size(path, 0, SETTINGS) == (1200, 900)
    assert _decodes_during(monkeypatch, lambda: prepare_page(_ref(path), SETTINGS, keep_full=False)) == 1


def test_png_exif_after_its_pixel_data_still_turns_the_page(tmp_path: Path) -> None:
    """An eXIf chunk may follow IDAT: orientation 6 there still makes the stored 1200x900 page 900x1200."""
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    Image.open(_photo(tmp_path / "photo.jpg", size=(1200, 900))).save(buffer, "PNG")
    data = buffer.getvalue()
    iend = data.rindex(b"IEND") - 4
    path = tmp_path / "late_exif.png"
    path.write_bytes(data[:iend] + _png_chunk(b"eXIf", exif.tobytes()) + data[iend:])
    assert page_size(path, 0, SETTINGS) == (900, 1200)
    assert open_page(path, 0, SETTINGS).size == (900, 1200)


def _a4_pdf(path: Path) -> Path:
    """An A4 page (595 x 842 pt) with a card image on it."""
    page = Image.new("RGB", (595, 842), "white")
    page.paste(_card(5).resize((428, 270)), (40, 40))
    page.save(path, "PDF", resolution=72.0)
    return path


def test_pdf_is_rendered_at_the_dpi_min_size_needs(tmp_path: Path) -> None:
    path = _a4_pdf(tmp_path / "a4.pdf")
    settings = PrepareSettings(pdf_dpi=200)
    assert page_size(path, 0, settings) == open_page(path, 0, settings).size == (1653, 2339)  # ceil, as pdfium
    reduced = open_page(path, 0, settings, min_size=(1131, 1600))
    assert 1600 <= reduced.size[1] <= 1601 and 1131 <= reduced.size[0] <= 1132  # ~137 dpi, not 200
    assert open_page(path, 0, settings, min_size=(3000, 4000)).size == (1653, 2339)  # never above pdf_dpi


def test_pixel_cap_applies_to_the_declared_size_of_a_reduced_decode(tmp_path: Path) -> None:
    path = _photo(tmp_path / "photo.jpg")
    capped = PrepareSettings(max_input_pixels=4000 * 3000 - 1)
    result = prepare_page(_ref(path), capped, keep_full=False)
    assert isinstance(result, Failure) and result.reason == Reason.TOO_MANY_PIXELS


def test_truncated_jpeg_fails_when_reduced_too(tmp_path: Path) -> None:
    path = _photo(tmp_path / "photo.jpg")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    result = prepare_page(_ref(path), SETTINGS, keep_full=False)
    assert isinstance(result, Failure) and result.reason == Reason.DECODE_ERROR


# --- load: VerifiedPage -----------------------------------------------------------------------------------

def test_vlm_working_page_of_a_photo_is_decoded_at_half_size(tmp_path: Path) -> None:
    ref = _ref(_photo(tmp_path / "photo.jpg"))
    page = VerifiedPage(ref, SETTINGS)
    assert page.size == (4000, 3000) and page.decoded_size is None
    working = page.region(None, (1600, 1200))
    assert page.decoded_size == (2000, 1500)  # 1/2, not the full 11 MP
    assert working.shape == (1200, 1600, 3)
    reference = _full_decode_working(ref, VLM_EDGE)
    assert working.shape == reference.shape
    assert np.abs(working.astype(np.float32) - reference).mean() < 3


def test_a_vlm_page_is_made_at_the_size_sent_from_a_decode_a_little_smaller(tmp_path: Path) -> None:
    """An A4 JPEG (1700x2400) sent at 832x1216: with 2 % slack it is decoded at half size (1200 px, 1.3 % short)
    instead of whole, and the working page is already the size sent (one resize, not two)."""
    path = _photo(tmp_path / "a4.jpg", size=(1700, 2400))
    size = fit_to_budget(1700, 2400, SETTINGS)
    assert size == (832, 1216)
    strict = VerifiedPage(_ref(path), SETTINGS)
    strict.region(None, size)
    assert strict.decoded_size == (1700, 2400)
    page = VerifiedPage(_ref(path), SETTINGS)
    working = page.region(None, size, slack=0.02)
    assert page.decoded_size == (850, 1200)
    assert working.shape == (1216, 832, 3)
    reference = cv2.resize(load_page(_ref(path), SETTINGS), size, interpolation=cv2.INTER_AREA)
    assert np.abs(working.astype(np.float32) - reference).mean() < 3
    vlm_working, _ = _working_page(_ref(path), SETTINGS, keep_full=False)
    assert vlm_working.shape == working.shape and np.array_equal(vlm_working, working)


def test_a_full_decode_is_reused_not_repeated(tmp_path: Path) -> None:
    path = tmp_path / "page.png"
    Image.new("RGB", (3000, 2000), "white").save(path)
    page = VerifiedPage(_ref(path), SETTINGS)
    whole = page.pixels(5000)  # more than the page has: full size, once
    assert whole.shape == (2000, 3000, 3)
    assert page.region((0, 0, 1500, 1000), (800, 533)).shape == (533, 800, 3)
    assert page.pixels() is whole  # the region was cut from the array in hand: nothing decoded again
    assert page.pixels(5000) is whole


def test_ocr_working_page_of_a_photo_stays_full_size(tmp_path: Path) -> None:
    """4000 px shrunk to 2400: no DCT scale (1/2 = 2000 px) is large enough, so the page is decoded whole."""
    page = VerifiedPage(_ref(_photo(tmp_path / "photo.jpg")), SETTINGS)
    assert page.region(None, (2400, 1800)).shape == (1800, 2400, 3)
    assert page.decoded_size == (4000, 3000)


@pytest.mark.parametrize("working_edge", [VLM_EDGE, OCR_EDGE])
def test_flatbed_card_keeps_its_size_and_pixels(tmp_path: Path, working_edge: int) -> None:
    """The card is found on a reduced decode; the card itself (~1800 px) needs the full one, and ends exactly
    as cropping a full decode would make it."""
    ref = _ref(_flatbed(tmp_path / "flatbed.jpg"))
    page = VerifiedPage(ref, SETTINGS)
    preview = page.pixels(max(working_edge, 800))
    assert max(preview.shape[:2]) >= max(working_edge, 800)
    box = find_document(preview, page.size)
    assert box is not None
    reference_box = find_document(load_page(ref, SETTINGS))
    assert max(abs(a - b) for a, b in zip(box, reference_box, strict=True)) <= 4  # same box, to a few px
    x0, y0, x1, y1 = box
    assert max(x1 - x0, y1 - y0) < 2 * working_edge  # ... so the card needs more than half the page's pixels
    working = page.region(box, capped_size(box[2] - box[0], box[3] - box[1], working_edge))
    assert page.decoded_size == page.size
    reference = _full_decode_working(ref, working_edge)
    assert abs(working.shape[0] - reference.shape[0]) <= 4 and abs(working.shape[1] - reference.shape[1]) <= 4
    assert max(working.shape[:2]) >= min(working_edge, 0.9 * 1630)  # the card keeps its scan resolution


def test_card_large_enough_is_decoded_again_at_the_scale_it_needs(tmp_path: Path) -> None:
    """With an 800 px working size, the 4000 px page is searched at 1/4 (1000 px) and the ~1800 px card then
    decoded at 1/2 (~900 px, enough for 800): two small decodes instead of a full one."""
    settings = PrepareSettings(max_long_edge=800)
    ref = _ref(_flatbed(tmp_path / "flatbed.jpg"))
    page = VerifiedPage(ref, settings)
    box = find_document(page.pixels(800), page.size)
    assert page.decoded_size == (707, 1000)
    working = page.region(box, capped_size(box[2] - box[0], box[3] - box[1], 800))
    assert page.decoded_size == (1414, 2000)
    x0, y0, x1, y1 = box
    assert working.shape[1::-1] == capped_size(x1 - x0, y1 - y0, 800)
    reference = _full_decode_working(ref, 800)
    assert abs(working.shape[0] - reference.shape[0]) <= 2 and abs(working.shape[1] - reference.shape[1]) <= 2


def test_prepare_page_sends_what_a_full_decode_would(tmp_path: Path) -> None:
    """End to end through `prepare_page`: same sent size, orientation and nearly the same pixels."""
    for path in (_photo(tmp_path / "photo.jpg"), _flatbed(tmp_path / "flatbed.jpg")):
        ref = _ref(path)
        for keep_full, edge in ((False, VLM_EDGE), (True, OCR_EDGE)):
            prepared = prepare_page(ref, SETTINGS, keep_full=keep_full)
            assert isinstance(prepared, PreparedImage)
            assert prepared.original_size == Image.open(path).size
            upright, found = make_upright(_full_decode_working(ref, edge))
            assert (prepared.rotation_applied, prepared.skew_corrected) == (found.rotation, found.skew)
            assert prepared.sent_size == fit_to_budget(upright.shape[1], upright.shape[0], SETTINGS)


def test_pdf_page_is_rendered_at_working_size(tmp_path: Path) -> None:
    ref = _ref(_a4_pdf(tmp_path / "a4.pdf"))
    page = VerifiedPage(ref, SETTINGS)
    assert page.size == (1653, 2339)  # the page at pdf_dpi (200)
    assert page.region(None, capped_size(1653, 2339, VLM_EDGE)).shape[1::-1] == (1131, 1600)
    assert 1600 <= page.decoded_size[1] <= 1601  # rendered at ~137 dpi
    prepared = prepare_page(ref, SETTINGS, keep_full=False)
    assert isinstance(prepared, PreparedImage)
    assert prepared.original_size == (1653, 2339)
    assert prepared.sent_size == fit_to_budget(1131, 1600, SETTINGS)


# --- dry run: predicted tokens equal sent tokens ----------------------------------------------------------

def test_dry_run_tokens_match_what_reduced_decodes_send(tmp_path: Path) -> None:
    """Plain pages (no skew to straighten, nothing to crop): the header-only estimate must equal the tokens of
    the pages actually prepared for a VLM, reduced decodes included."""
    folder = tmp_path / "in"
    folder.mkdir()
    plain = Image.new("RGB", (4000, 3000), (240, 240, 240))
    plain.paste((30, 30, 30), (200, 200, 3800, 2800))  # a dark block filling the frame: no crop
    plain.save(folder / "photo.jpg", quality=90)
    exif = Image.Exif()
    exif[0x0112] = 8
    plain.resize((3264, 2448)).save(folder / "turned.jpg", quality=90, exif=exif.tobytes())
    plain.resize((1011, 638)).save(folder / "card.png")
    buf = io.BytesIO()
    plain.resize((842, 595)).save(buf, "PDF", resolution=72.0)
    (folder / "landscape.pdf").write_bytes(buf.getvalue())
    estimate = estimate_folder(folder, Settings())
    refs = [item for item in Discovery(folder).items() if isinstance(item, DocumentRef)]
    prepared = [prepare_page(ref, SETTINGS, keep_full=False) for ref in refs]
    assert all(isinstance(p, PreparedImage) and p.skew_corrected == 0 for p in prepared)
    assert estimate.pages == len(prepared) == 4
    assert estimate.visual_tokens == sum(p.visual_tokens for p in prepared)
    assert math.prod(fit_to_budget(4000, 3000, SETTINGS)) // 32 ** 2 in {p.visual_tokens for p in prepared}
