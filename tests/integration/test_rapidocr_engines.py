"""The shared engine's two stages against RapidOCR's defaults on the same model files: the text detector runs on
OpenVINO, compiled per page shape (`rapidocr_stages._probability_map`), and must give ONNX Runtime's map and
boxes, also for pages detected from several threads at once; the recogniser runs on ONNX Runtime with an arena
shrunk after each large batch (`rapidocr_stages._ArenaShrinkingSession`) and must read every crop as RapidOCR's
own session (no arena) does, after a large batch and after a small one."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from rapidocr import RapidOCR
from rapidocr.ch_ppocr_det.utils import DetPreProcess
from rapidocr.ch_ppocr_rec import TextRecInput

from pipeline.extract.ocr import rapidocr_stages
from synth import render as R
from synth.identities import random_mrz_person


def _bgr(rendered: R.Rendered) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(rendered.image.convert("RGB"))[:, :, ::-1])


def test_the_openvino_detector_gives_onnx_runtimes_map_and_boxes():
    bgr = _bgr(R.id_card_td1(random_mrz_person(random.Random(3), "id_card")))
    detector = rapidocr_stages._engine()._load_det_model()
    reference = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False})._load_det_model()
    assert type(detector.session).__module__.startswith("rapidocr.inference_engine.openvino")
    assert type(reference.session).__module__.startswith("rapidocr.inference_engine.onnxruntime")
    limit_type, limit_side_len = rapidocr_stages.detector_limit(*bgr.shape[:2])
    tensor = DetPreProcess(limit_side_len, limit_type, detector.mean, detector.std)(bgr)

    ours, theirs = rapidocr_stages._probability_map(detector, tensor), reference.session(tensor)

    assert ours.shape == theirs.shape
    assert float(np.abs(ours - theirs).max()) < 1e-3
    boxes, _ = detector.postprocess_op(ours, bgr.shape[:2])
    expected, _ = reference.postprocess_op(theirs, bgr.shape[:2])
    assert len(boxes) == len(expected) >= 10
    assert float(np.abs(np.asarray(boxes) - np.asarray(expected)).max()) <= 1.0


def test_pages_detected_from_several_threads_at_once_get_their_own_boxes():
    pages = [_bgr(R.id_card_td1(random_mrz_person(random.Random(5), "id_card"))),
             _bgr(R.visa_mrva(random_mrz_person(random.Random(6), "visa")))]
    alone = [rapidocr_stages.detect(p).boxes for p in pages]
    assert alone[0].shape != alone[1].shape or not np.array_equal(alone[0], alone[1])

    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: (i, rapidocr_stages.detect(pages[i]).boxes), [0, 1] * 4))

    for i, boxes in together:
        np.testing.assert_array_equal(boxes, alone[i])


def test_the_recogniser_with_its_shrunk_arena_reads_as_rapidocrs_own_session():
    page = rapidocr_stages.detect(_bgr(R.passport_td3(random_mrz_person(random.Random(7), "passport"))))
    recogniser = rapidocr_stages._engine()._load_rec_model()
    reference = RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False,
                                 "Rec.rec_batch_num": rapidocr_stages.REC_BATCH})._load_rec_model()
    assert type(recogniser.session).__name__ == "_ArenaShrinkingSession"
    assert type(reference.session).__module__.startswith("rapidocr.inference_engine.onnxruntime")
    assert len(page.batches) >= 3
    session = recogniser.session
    shrunk: list[bool] = []  # per run: whether it gave the arena back (a large batch) or kept it (a small one)

    def run(outputs, feed, options):  # noqa: ANN001, ANN202 - ONNX Runtime's own signature
        shrunk.append(options is not None)
        return inner(outputs, feed, options)

    inner, session._run = session._run, run
    try:
        for batch in page.batches:
            crops = [page.crops[i] for i in batch]
            ours, theirs = recogniser(TextRecInput(img=crops)), reference(TextRecInput(img=crops))
            assert ours.txts == theirs.txts
            assert np.allclose(ours.scores, theirs.scores, atol=1e-5)
    finally:
        session._run = inner
    assert True in shrunk and False in shrunk  # both kinds of run read as RapidOCR's own session


def test_the_last_shapes_detector_is_kept_and_reads_a_page_as_a_fresh_one():
    td1 = _bgr(R.id_card_td1(random_mrz_person(random.Random(8), "id_card")))
    visa = _bgr(R.visa_mrva(random_mrz_person(random.Random(9), "visa")))
    rapidocr_stages._compiled.clear()  # whatever an earlier test left: the first read below compiles afresh
    first = rapidocr_stages.detect(td1).boxes
    kept = dict(rapidocr_stages._compiled)
    assert len(kept) == 1

    again = rapidocr_stages.detect(td1).boxes
    assert dict(rapidocr_stages._compiled) == kept  # the same compiled model, not a new compile
    rapidocr_stages.detect(visa)
    assert len(rapidocr_stages._compiled) == 1 and rapidocr_stages._compiled.keys() != kept.keys()

    np.testing.assert_array_equal(again, first)
