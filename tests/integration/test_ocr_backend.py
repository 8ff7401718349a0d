"""The embedded OCR's reading order and shortcuts, on generated documents read by the real models: stopping
early never changes a reading, the 180° re-read follows the prepare stage's confidence, and capping the
detector on a big page keeps the fields."""

from __future__ import annotations

import random
from datetime import date
from pathlib import Path

import cv2
import numpy as np

from pipeline.datamodel import DocumentRef, PreparedImage
from pipeline.extract.ocr import page_read
from pipeline.extract.ocr.backend import OcrBackend, read_page
from pipeline.extract.ocr.rapidocr_stages import detector_limit
from synth import render as R
from synth.identities import random_mrz_person

TODAY = date(2026, 11, 30)


def _td1(seed: int) -> R.Rendered:
    return R.id_card_td1(random_mrz_person(random.Random(seed), "id_card"))


def _prepared(pixels: np.ndarray, orientation_confidence: float) -> PreparedImage:
    h, w = pixels.shape[:2]
    ref = DocumentRef(Path("/in/card.png"), "card.png", "0" * 64)
    return PreparedImage(ref=ref, pixels=pixels, original_size=(w, h), sent_size=(w, h), rotation_applied=0,
                         skew_corrected=0.0, orientation="landscape", visual_tokens=0,
                         orientation_confidence=orientation_confidence)


def test_early_stop_reads_fewer_boxes_and_the_same_reading():
    """A visa whose MRZ checks out and whose printed zone confirms it stops before reading every box, and
    its reading (fields, states, checks, failures) is the full read's."""
    r = R.visa_mrva(random_mrz_person(random.Random(0), "visa"))
    pixels = np.asarray(r.image)
    full_lines, full = page_read.read_lines(pixels, TODAY, stop_early=False)
    early_lines, early = page_read.read_lines(pixels, TODAY)
    assert page_read.decided(early)
    assert len(early_lines) < len(full_lines)
    assert (early.doc_type, early.fields, early.states, early.checks, early.check_failures) == \
        (full.doc_type, full.fields, full.states, full.checks, full.check_failures)
    assert (early.fields["name"], early.fields["id_number"], early.fields["expiry_date"]) == \
        (r.name, r.id_number, r.expiry_date)


def test_an_unconfirmed_zone_reads_every_box():
    """With the printed name painted over, the zone's name has no confirmation: every box is read."""
    r = _td1(4)
    img = r.image.copy()
    pixels = np.asarray(img).copy()
    mrz_top = min(box[1] for box in r.mrz_boxes)
    pixels[: int(mrz_top) - 10, : pixels.shape[1] // 2 + 80] = 255  # the upper left: photo side, name, number
    full_lines, _ = page_read.read_lines(pixels, TODAY, stop_early=False)
    early_lines, early = page_read.read_lines(pixels, TODAY)
    assert not page_read.decided(early)
    assert [x.text for x in early_lines] == [x.text for x in full_lines]


def test_upside_down_page_is_flipped_only_when_orientation_was_unsure():
    r = _td1(5)
    upside_down = np.ascontiguousarray(np.asarray(r.image)[::-1, ::-1])
    backend = OcrBackend(today=TODAY)
    unsure = backend.read(_prepared(upside_down, 0.6))
    assert unsure.rotation_correction == 180
    assert unsure.fields["id_number"] == r.id_number
    sure = backend.read(_prepared(upside_down, 0.95))
    assert sure.rotation_correction == 0
    assert sure.fields["id_number"] is None


def test_detector_is_capped_on_big_pages_only():
    assert detector_limit(540, 856) == ("min", 736)  # small: enlarged as RapidOCR does by default
    assert detector_limit(1600, 2400) == ("max", 1280)
    assert detector_limit(800, 2000) == ("max", 1840)  # a strip keeps a 736 px short side
    assert detector_limit(900, 1200) == ("max", 1200)  # in between: as it is


def test_a_2400_px_page_reads_the_same_fields():
    r = R.passport_td3(random_mrz_person(random.Random(8), "passport"))
    small = np.asarray(r.image)
    scale = 2400 / max(small.shape[:2])
    big = cv2.resize(small, None, fx=scale, fy=scale, interpolation=cv2.INTER_CUBIC)
    assert detector_limit(*big.shape[:2])[1] <= 1280
    reading, _ = read_page(big, TODAY)
    assert (reading.fields["name"], reading.fields["id_number"], reading.fields["expiry_date"]) == \
        (r.name, r.id_number, r.expiry_date)
    assert {"mrz.number", "mrz.expiry", "cross.name_mrz_vs_viz"} <= set(reading.checks)


def test_onnx_runtime_threads_follow_the_cores_the_process_may_use():
    """Pinned to one core (`taskset`, as a container's cpuset pins a run), the OCR asks ONNX Runtime for one
    thread; unpinned, for every core it may use."""
    import os
    import subprocess
    import sys

    probe = [sys.executable, "-c",
             "from pipeline.extract.ocr.rapidocr_stages import usable_cores; print(usable_cores())"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent.parent)}
    pinned = subprocess.run(["taskset", "-c", str(min(os.sched_getaffinity(0))), *probe], env=env,
                            capture_output=True, text=True, check=True, timeout=120)
    free = subprocess.run(probe, env=env, capture_output=True, text=True, check=True, timeout=120)
    assert int(pinned.stdout) == 1
    assert int(free.stdout) == len(os.sched_getaffinity(0))
