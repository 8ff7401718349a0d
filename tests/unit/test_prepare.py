"""The prepare stage: decoding every pixel mode, orientation, the token budget, and `prepare_page` turning
every bad input into a Failure with the right stage and reason (real specimens: tests/realdata/)."""

from __future__ import annotations

import io
import random
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import DocumentRef, Failure, Reason
from pipeline.ingest.containers import ContainerError
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.prepare.load import load_page
from pipeline.prepare.orient import Orientation, apply_orientation, detect_orientation
from pipeline.prepare.resize import encode, fit_to_budget, resize_to, visual_tokens
from pipeline.settings import PrepareSettings
from tests.unit.test_containers import png_header_only

SETTINGS = PrepareSettings()



def _ref(path: Path, page: int = 0) -> DocumentRef:
    return DocumentRef(path=path, rel_path=path.name, sha256=sha256_file(path), page=page)


def _load(path: Path) -> np.ndarray:
    return load_page(_ref(path), SETTINGS)


# --- load: every pixel mode to 8-bit RGB ----------------------------------------------------------------

def test_cmyk_jpeg(tmp_path: Path) -> None:
    path = tmp_path / "cmyk.jpg"
    Image.new("CMYK", (64, 64), (0, 255, 255, 0)).save(path, "JPEG", quality=95)  # pure red in CMYK
    px = _load(path)
    assert px.shape == (64, 64, 3) and px.dtype == np.uint8
    assert np.allclose(px[32, 32], (255, 0, 0), atol=6)


def test_16bit_grey_png_is_scaled_not_clipped(tmp_path: Path) -> None:
    path = tmp_path / "grey16.png"
    grey = np.zeros((60, 90), np.uint16)
    grey[:, 30:60], grey[:, 60:] = 0x8080, 0xFFFF
    assert cv2.imwrite(str(path), grey)
    assert Image.open(path).mode.startswith("I")
    px = _load(path)
    assert px.shape == (60, 90, 3)
    assert tuple(px[10, 10]) == (0, 0, 0)
    assert tuple(px[10, 45]) == (128, 128, 128)
    assert tuple(px[10, 80]) == (255, 255, 255)


def test_16bit_rgb_png(tmp_path: Path) -> None:
    path = tmp_path / "rgb16.png"
    bgr = np.zeros((64, 64, 3), np.uint16)
    bgr[..., 2] = 0xFFFF  # red
    bgr[25:, :, 1] = 0x8080  # bottom half adds half green
    assert cv2.imwrite(str(path), bgr)
    px = _load(path)
    assert tuple(px[5, 5]) == (255, 0, 0)
    assert np.allclose(px[40, 5], (255, 128, 0), atol=1)


def test_palette_png_with_transparency_goes_on_white(tmp_path: Path) -> None:
    path = tmp_path / "palette.png"
    img = Image.new("P", (64, 64), 0)
    img.putpalette([0, 0, 0, 0, 0, 255] + [0] * 762)  # index 0 black (transparent), index 1 blue
    img.paste(1, (0, 0, 32, 64))
    img.save(path, transparency=0)
    px = _load(path)
    assert tuple(px[20, 5]) == (0, 0, 255)
    assert tuple(px[20, 50]) == (255, 255, 255)


def test_rgba_png_composited_on_white(tmp_path: Path) -> None:
    path = tmp_path / "rgba.png"
    rgba = np.zeros((48, 96, 4), np.uint8)  # transparent black
    rgba[:, :32] = (255, 0, 0, 255)  # opaque red
    rgba[:, 64:] = (0, 0, 0, 128)  # half-transparent black
    Image.fromarray(rgba).save(path)
    px = _load(path)
    assert tuple(px[10, 10]) == (255, 0, 0)
    assert tuple(px[10, 48]) == (255, 255, 255)
    assert np.allclose(px[10, 80], (127, 127, 127), atol=2)


def test_la_png_composited_on_white(tmp_path: Path) -> None:
    path = tmp_path / "la.png"
    la = np.zeros((48, 48, 2), np.uint8)
    la[:, :24] = (0, 255)  # opaque black; right half transparent
    Image.fromarray(la, "LA").save(path)
    px = _load(path)
    assert tuple(px[5, 5]) == (0, 0, 0)
    assert tuple(px[5, 40]) == (255, 255, 255)


def test_one_bit_and_grey(tmp_path: Path) -> None:
    bits = Image.new("1", (64, 64), 1)
    bits.paste(0, (0, 0, 32, 64))
    bits.save(tmp_path / "bits.png")
    Image.new("L", (64, 64), 77).save(tmp_path / "grey.png")
    px = _load(tmp_path / "bits.png")
    assert tuple(px[5, 5]) == (0, 0, 0) and tuple(px[5, 60]) == (255, 255, 255)
    assert tuple(_load(tmp_path / "grey.png")[5, 5]) == (77, 77, 77)


@pytest.mark.parametrize(("orientation", "size", "marker_at"), [
    (6, (80, 120), (75, 5)),  # stored 120x80, "rotate 90 CW to view": stored top-left shows top-right
    (3, (120, 80), (115, 75)),  # "rotate 180": stored top-left shows bottom-right
])
def test_exif_orientation_is_applied(tmp_path: Path, orientation: int, size: tuple[int, int],
                                     marker_at: tuple[int, int]) -> None:
    stored = Image.new("RGB", (120, 80), "white")
    stored.paste((255, 0, 0), (0, 0, 20, 20))
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / f"exif{orientation}.jpg"
    stored.save(path, "JPEG", exif=exif.tobytes(), quality=95)
    px = _load(path)
    assert (px.shape[1], px.shape[0]) == size
    x, y = marker_at
    assert px[y, x, 0] > 200 and px[y, x, 1] < 60  # red
    assert px[size[1] // 2, size[0] // 2, 1] > 200  # white centre


@pytest.mark.parametrize("size", [(1, 1), (40, 400), (400, 23), (100, 47)])
def test_too_small(tmp_path: Path, size: tuple[int, int]) -> None:
    path = tmp_path / "tiny.png"
    Image.new("RGB", size, "white").save(path)
    with pytest.raises(ContainerError) as e:
        _load(path)
    assert e.value.reason is Reason.TOO_SMALL


def test_a_strip_shaped_like_a_cut_out_zone_is_not_too_small(tmp_path: Path) -> None:
    """Two MRZ lines of 13 px characters: 367x39 px, readable, though below the minimum side."""
    path = tmp_path / "zone.png"
    Image.new("RGB", (367, 39), "white").save(path)
    assert _load(path).shape == (39, 367, 3)


def test_min_side_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "edge.png"
    Image.new("RGB", (48, 48), "white").save(path)
    assert _load(path).shape == (48, 48, 3)


# --- prepare_page: bad documents become Failures --------------------------------------------------------

def _truncated_jpeg(path: Path) -> None:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (400, 600, 3), np.uint8)).save(buf, "JPEG")
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])


BAD_INPUTS = {
    "empty.jpg": (lambda p: p.write_bytes(b""), "ingest", Reason.EMPTY_FILE),
    "text.jpg": (lambda p: p.write_text("hello"), "ingest", Reason.UNSUPPORTED_TYPE),
    "stub.png": (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00"), "ingest", Reason.UNREADABLE),
    "bomb.png": (lambda p: p.write_bytes(png_header_only(100_000, 100_000)), "ingest", Reason.TOO_MANY_PIXELS),
    "cut.jpg": (_truncated_jpeg, "preprocess", Reason.DECODE_ERROR),
    "dot.png": (lambda p: Image.new("RGB", (1, 1)).save(p), "preprocess", Reason.TOO_SMALL),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_prepare_page_turns_bad_documents_into_failures(tmp_path: Path, name: str) -> None:
    make, stage, reason = BAD_INPUTS[name]
    path = tmp_path / name
    make(path)
    result = prepare_page(_ref(path), SETTINGS)
    assert isinstance(result, Failure)
    assert (result.stage, result.reason) == (stage, reason)
    assert result.rel_path == name and result.page == 0 and result.detail


# --- orientation ----------------------------------------------------------------------------------------



def test_blank_page_is_left_alone() -> None:
    blank = np.full((300, 500, 3), 255, np.uint8)
    found = detect_orientation(blank)
    assert found == Orientation()
    assert apply_orientation(blank, found) is blank


def test_apply_orientation_geometry() -> None:
    page = np.zeros((100, 200, 3), np.uint8)
    page[:10, :10] = 255  # marker top-left
    turned = apply_orientation(page, Orientation(rotation=90))
    assert turned.shape == (200, 100, 3) and turned[5, 95].all()  # top-left goes top-right
    tilted = apply_orientation(page, Orientation(skew=10.0))
    assert tilted.shape[0] > 100 and tilted.shape[1] > 200  # canvas grows, corners kept


def test_flipped_is_the_other_way_up() -> None:
    found = Orientation(rotation=270, skew=1.5, confidence=0.6, lines=4)
    assert found.flipped() == Orientation(rotation=90, skew=1.5, confidence=pytest.approx(0.4), lines=4)


# --- resize: the token budget ---------------------------------------------------------------------------

def test_id1_card_costs_640_tokens() -> None:
    assert fit_to_budget(1011, 638, SETTINGS) == (1024, 640)
    assert visual_tokens(1024, 640, 32) == 640


@pytest.mark.parametrize(("size", "expected"), [
    ((2022, 1276), (1280, 800)),  # reference table, Qwen3.5 max_pixels 1,048,576
    ((1920, 1080), (1344, 768)),
    ((4032, 3024), (1152, 864)),
])
def test_matches_qwen_smart_resize_reference(size: tuple[int, int], expected: tuple[int, int]) -> None:
    assert fit_to_budget(*size, SETTINGS) == expected


def test_qwen25_patch_28() -> None:
    qwen25 = PrepareSettings(patch=28, max_long_edge=4096, max_pixels=12_845_056)
    assert fit_to_budget(1011, 638, qwen25) == (1008, 644)
    assert visual_tokens(1008, 644, 28) == 828


def test_budget_properties_on_many_sizes() -> None:
    rng = random.Random(7)
    sizes = [(rng.randint(1, 9000), rng.randint(1, 9000)) for _ in range(3000)]
    sizes += [(1, 1), (31, 31), (16, 5000), (5000, 16), (1600, 1600), (1601, 999), (3000, 40)]
    for settings in (SETTINGS, PrepareSettings(max_long_edge=1000, max_pixels=300_000, patch=28)):
        f = settings.patch
        for width, height in sizes:
            w, h = fit_to_budget(width, height, settings)
            assert w % f == 0 and h % f == 0 and w >= f and h >= f
            assert max(w, h) <= max(settings.max_long_edge, f)
            assert w * h <= max(settings.max_pixels, f * max(w, h))
            ideal = min(1.0, (settings.max_pixels / (width * height)) ** 0.5,
                        settings.max_long_edge / max(width, height))
            # each side within one patch of the ideal scaled size (or bumped up to one patch)
            assert abs(w - width * ideal) <= f + 1e-6 or w == f, (width, height, w, h)
            assert abs(h - height * ideal) <= f + 1e-6 or h == f, (width, height, w, h)
            if min(w, h) >= 20 * f:
                assert w / h == pytest.approx(width / height, rel=0.06), (width, height, w, h)
            if width % f == 0 and height % f == 0 and width * height <= settings.max_pixels \
                    and max(width, height) <= settings.max_long_edge:
                assert (w, h) == (width, height)  # already on the grid and within budget: untouched


def test_resize_and_encode() -> None:
    page = np.random.default_rng(3).integers(0, 256, (638, 1011, 3), np.uint8)
    out = resize_to(page, fit_to_budget(1011, 638, SETTINGS))
    assert out.shape == (640, 1024, 3) and out.dtype == np.uint8
    small = resize_to(page, (512, 320))
    assert small.shape == (320, 512, 3)
    assert resize_to(page, (1011, 638)) is page
    data, mime = encode(small, "png")
    assert mime == "image/png"
    assert np.array_equal(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[..., ::-1], small)
    data, mime = encode(small, "jpeg", quality=80)
    assert mime == "image/jpeg" and data[:3] == b"\xff\xd8\xff"
    data, mime = encode(small, "webp", quality=80)
    assert mime == "image/webp" and data[8:12] == b"WEBP"
    with pytest.raises(ValueError):
        encode(small, "gif")
