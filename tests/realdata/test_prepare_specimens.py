"""The prepare stage on real specimens: prepare_page on card photos and PDFs, and orientation (rotation and
skew) found and undone."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import PreparedImage
from pipeline.prepare import FULL_MAX_LONG_EDGE, FULL_MIN_LONG_EDGE, prepare_page
from pipeline.prepare.orient import (
    PAGE_MIN_CONFIDENCE,
    _classify_page,
    _get_models,
    _orientation_from_lines,
    _rotate_small,
    detect_orientation,
    make_upright,
)
from tests.unit.test_prepare import SETTINGS, _ref


SPECIMENS = [
    "arg0s1080_mrz_specimens/images/passports/Canada.png",
    "cn_resident_id_synthetic/images/bzsome_front_crop.png",
    "arg0s1080_mrz_specimens/images/id_cards/Latvia.png",
]


def _rgb(path: Path) -> np.ndarray:
    return np.ascontiguousarray(cv2.imread(str(path), cv2.IMREAD_COLOR)[..., ::-1])


def _turn(upright: np.ndarray, clockwise_needed: int, skew_needed: float) -> np.ndarray:
    """The specimen turned so that `clockwise_needed` then `skew_needed` degrees clockwise undo it."""
    turned = np.ascontiguousarray(np.rot90(upright, k=clockwise_needed // 90))  # np.rot90 turns CCW
    return _rotate_small(turned, -skew_needed) if skew_needed else turned


def test_prepare_page_on_a_specimen(realdata_dir: Path) -> None:
    path = realdata_dir / "midv2020_templates_via_sidtd/images/alb00.jpg"
    result = prepare_page(_ref(path), SETTINGS)
    assert isinstance(result, PreparedImage)
    w, h = result.sent_size
    assert result.pixels.shape == (h, w, 3) and result.pixels.dtype == np.uint8
    assert w % 32 == 0 and h % 32 == 0 and max(w, h) <= 1600 and w * h <= SETTINGS.max_pixels
    assert result.visual_tokens == (w // 32) * (h // 32)
    assert result.original_size == Image.open(path).size
    assert result.rotation_applied == 0 and result.orientation == "landscape"
    assert result.full_pixels is not None and max(result.full_pixels.shape[:2]) <= FULL_MAX_LONG_EDGE
    assert result.full_pixels.shape[1] > w


def test_prepare_page_turns_a_sideways_card_upright(tmp_path: Path, realdata_dir: Path) -> None:
    upright = _rgb(realdata_dir / SPECIMENS[1])
    path = tmp_path / "sideways.png"
    Image.fromarray(np.ascontiguousarray(np.rot90(upright))).save(path)  # rot90 = 90 deg counter-clockwise
    result = prepare_page(_ref(path), SETTINGS)
    assert isinstance(result, PreparedImage)
    assert result.rotation_applied == 90
    assert result.orientation == "landscape"
    assert result.original_size == (upright.shape[0], upright.shape[1])


def test_prepare_page_second_pdf_page(tmp_path: Path, realdata_dir: Path) -> None:
    card = Image.fromarray(_rgb(realdata_dir / SPECIMENS[2]))
    path = tmp_path / "two.pdf"
    Image.new("RGB", card.size, "white").save(path, "PDF", save_all=True, append_images=[card], resolution=150.0)
    result = prepare_page(_ref(path, page=1), SETTINGS)
    assert isinstance(result, PreparedImage)
    assert result.orientation == "portrait" and result.rotation_applied == 0
    assert result.sent_size == (512, 640)  # 500x639 rendered at 200 dpi: under the budget, nearest grid
    assert result.full_pixels is None  # nothing was lost to the budget, so no second copy


def test_a_small_skewed_page_is_enlarged_for_the_ocr_before_it_is_deskewed(tmp_path: Path,
                                                                          realdata_dir: Path) -> None:
    """Deskewing a small capture blurs its small print; the OCR's copy is enlarged (cubic) to
    FULL_MIN_LONG_EDGE first, while what a VLM is sent stays at the page's own size."""
    card = cv2.resize(_rgb(realdata_dir / SPECIMENS[0]), (560, 400), interpolation=cv2.INTER_AREA)
    path = tmp_path / "small_skewed.png"
    Image.fromarray(_turn(card, 0, 7.0)).save(path)
    result = prepare_page(_ref(path), SETTINGS)
    assert isinstance(result, PreparedImage) and result.skew_corrected == pytest.approx(7.0, abs=2.0)
    assert result.full_pixels is not None and max(result.full_pixels.shape[:2]) >= FULL_MIN_LONG_EDGE
    for_vlm = prepare_page(_ref(path), SETTINGS, keep_full=False)
    assert isinstance(for_vlm, PreparedImage) and for_vlm.full_pixels is None
    assert for_vlm.sent_size == result.sent_size  # the same page, resampled in another order: not enlarged
    assert np.abs(for_vlm.pixels.astype(np.float32) - result.pixels).mean() < 3
    assert max(result.sent_size) < FULL_MIN_LONG_EDGE


@pytest.mark.parametrize("skew", [0.0, 7.0, -7.0])
@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
@pytest.mark.parametrize("specimen", SPECIMENS)
def test_orientation_undoes_rotation_and_skew(realdata_dir: Path, specimen: str, rotation: int,
                                              skew: float) -> None:
    found = detect_orientation(_turn(_rgb(realdata_dir / specimen), rotation, skew))
    assert found.rotation == rotation
    assert found.skew == pytest.approx(skew, abs=2.0)
    assert 0.5 <= found.confidence <= 1.0
    assert found.method == "page" and found.confidence >= PAGE_MIN_CONFIDENCE or found.method == "lines" \
        and found.lines > 0


@pytest.mark.parametrize("rotation", [0, 90, 180, 270])
def test_careful_path_alone_undoes_rotation_and_skew(realdata_dir: Path, rotation: int) -> None:
    """The detector path, taken when the page classifier is unsure, still stands on its own."""
    found = _orientation_from_lines(_turn(_rgb(realdata_dir / SPECIMENS[0]), rotation, -7.0))
    assert (found.rotation, found.method) == (rotation, "lines") and found.lines > 0
    assert found.skew == pytest.approx(-7.0, abs=2.0)


def test_without_the_page_model_file_every_page_takes_the_careful_path(
        realdata_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A checkout or wheel that lost the model file still orients, slower, and says how to restore it."""
    from pipeline.prepare import orient

    monkeypatch.setattr(orient, "PAGE_MODEL", "not_fetched.onnx")
    monkeypatch.setattr(orient, "_page_model", None)
    found = orient.detect_orientation(_turn(_rgb(realdata_dir / SPECIMENS[0]), 90, 0.0))
    assert (found.rotation, found.method) == (90, "lines")
    assert "tools/fetch_page_orientation_model.py" in caplog.text


def test_page_classifier_is_sure_of_a_clean_card(realdata_dir: Path) -> None:
    upright = _rgb(realdata_dir / SPECIMENS[2])
    for rotation in (0, 90, 180, 270):
        needed, confidence = _classify_page(_turn(upright, rotation, 0.0))
        assert needed == rotation and confidence >= PAGE_MIN_CONFIDENCE


def test_orient_returns_the_upright_page(realdata_dir: Path) -> None:
    upright = _rgb(realdata_dir / SPECIMENS[0])
    restored, found = make_upright(_turn(upright, 270, 0.0))
    assert found.rotation == 270
    assert restored.shape == upright.shape
    assert np.array_equal(restored, upright)  # quarter turns are lossless


def test_models_are_shared_across_threads(realdata_dir: Path) -> None:
    page = _turn(_rgb(realdata_dir / SPECIMENS[2]), 180, 0.0)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        models = list(pool.map(lambda _: _get_models(), range(8)))
        results = list(pool.map(lambda _: detect_orientation(page), range(4)))
    assert all(m[0] is models[0][0] and m[1] is models[0][1] for m in models)
    assert all(r == results[0] for r in results) and results[0].rotation == 180
