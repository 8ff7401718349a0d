"""RapidOCR's detection and recognition as two separate calls, for the embedded backend.

Why not `RapidOCR.__call__`: it detects at one scale rule for every page and recognises every box it found.
The backend wants (1) a detector scale chosen per page: small pages enlarged as RapidOCR does (short side
736 px), big ones capped (a 2400 px flatbed page costs ~4x the detection of a 1280 px one and its lines are
still 20+ px high there), and (2) to recognise the boxes in an order of its choosing and stop once the page is
decided (`page_read`). The stages are RapidOCR's own: its detector (through the same loader RapidOCR uses, on
RapidOCR's OpenVINO engine, compiled per page shape: `_probability_map`), its crop, its recogniser (in its own
batches of `REC_BATCH` crops, on ONNX Runtime) and its score filter. One engine for the
process, shared by every thread: ONNX Runtime sessions are safe to run from several threads, and the detector's
scale rule, the only per-page state, is passed to RapidOCR's own pre-processing per call instead of being set on
the shared detector. An engine per thread cost a copy of both models and their buffers per worker thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.formats.document import OcrLine

DETECT_MIN_SHORT_SIDE = 736  # RapidOCR's default `limit_side_len` (type "min"): small pages are enlarged to it
DETECT_MAX_LONG_SIDE = 1280  # big pages are shrunk to this long edge, but never below the short side above
# Crops per recogniser call: RapidOCR's own 6, so every box reads exactly as in RapidOCR's full read. A batch
# is padded to its longest crop and on poor print that padding changes what is read; 1 (each crop alone) cut
# recognition time by ~40 % on one core (12 synthetic MRZ pages: 9.5 s vs 15.7 s) and lets the early stop work
# box by box, but changed enough text on the low-resolution specimens to lose one field of the real-data eval
# (141/147 vs 142/147: ICAO_Example2's name), so it is not taken.
REC_BATCH = 6
SHRINK_ABOVE_BYTES = 1_500_000  # a recogniser batch's input above this gives the arena back (_ArenaShrinkingSession)

_lock = threading.Lock()
_shared: list = []
_openvino: list = []  # one OpenVINO Core for the process (thread-safe), as the engine is one
_compiled: dict = {}  # input shape -> the detector compiled for it, buffers released: the last shape run


def _engine():  # noqa: ANN202 - RapidOCR has no public type to annotate with
    if not _shared:
        with _lock:
            if not _shared:
                from rapidocr import EngineType, RapidOCR

                # No per-line direction classifier: the prepare stage has already made the page upright and
                # `read_page` may retry the whole page at 180°, whereas the classifier, asked line by line,
                # turns single MRZ lines (fillers and digits look alike both ways up) upside down and garbles them.
                # The detector on OpenVINO (RapidOCR's own engine for it, same model file), compiled for each
                # page's shape: see `_probability_map`. The recogniser stays on ONNX Runtime, the quicker one for
                # its many small batches of changing width.
                _shared.append(RapidOCR(params={"Global.log_level": "error", "Global.use_cls": False,
                                                "Rec.rec_batch_num": REC_BATCH,
                                                "Det.engine_type": EngineType.OPENVINO,
                                                "EngineConfig.onnxruntime.enable_cpu_mem_arena": True,
                                                "EngineConfig.onnxruntime.intra_op_num_threads": usable_cores(),
                                                "EngineConfig.onnxruntime.inter_op_num_threads": 1}))
                recogniser = _shared[0]._load_rec_model()
                recogniser.session = _ArenaShrinkingSession(recogniser.session)
    return _shared[0]


class _ArenaShrinkingSession:
    """RapidOCR's ONNX Runtime session for the recogniser, each run of a large batch told to give its arena's free
    chunks back at its end (ONNX Runtime's `memory.enable_memory_arena_shrinkage` run option); everything else is
    the session's.

    Why: without an arena (RapidOCR's default) every intermediate tensor of a run is its own allocation, and those
    of 4 MB and more are mmapped and unmapped (`pipeline.memory`), so the system's page faults took about a
    quarter of the embedded reader's CPU on real pages. A kept arena ends those faults but holds the largest
    batch's tensors for good (+390 MB over the real specimens' batches); shrunk after each run it holds them
    only during the run (+50 MB at the peak), for a sixth of the faults. Only a batch whose input is over
    `SHRINK_ABOVE_BYTES` gives the arena back: the many small batches (six crops up to ~9 times as wide as high)
    then reuse what the last one left instead of faulting it in again, and what they keep is small. On the real
    specimens, one core: recognition 0.56-0.58 s a page against 0.60-0.62 s, peak 698 MiB against 735 MiB; shrunk
    above 2-3 MB it was as quick but peaked at ~795 MiB, never shrunk 945 MiB."""

    def __init__(self, inner: object) -> None:
        import onnxruntime

        self._inner = inner
        self._run = inner.session.run
        self._inputs = [v.name for v in inner.session.get_inputs()]
        self._outputs = [v.name for v in inner.session.get_outputs()]
        self._options = onnxruntime.RunOptions()
        self._options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    def __call__(self, input_content: np.ndarray) -> np.ndarray:
        options = self._options if input_content.nbytes > SHRINK_ABOVE_BYTES else None
        return self._run(self._outputs, dict(zip(self._inputs, [input_content])), options)[0]

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity), for ONNX Runtime's thread pool.

    Why: left to itself ONNX Runtime sizes its pool from the machine's cores, not from the ones the process is
    allowed (`taskset`, a container's cpuset), and its threads spin while they wait for work; two threads on one
    allowed core took ~1.4x the CPU of one thread for the same page (same text read). On an unrestricted process
    this is the machine's core count, as before."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity call on this platform
        return max(1, os.cpu_count() or 1)


def detector_limit(height: int, width: int) -> tuple[str, int]:
    """RapidOCR's (`limit_type`, `limit_side_len`) for a page: today's "min 736" rule for pages whose short
    side is below 736 (enlarged, unchanged), else a "max" cap at 1280 px long edge that stops where the short
    side would drop below 736 (a long strip keeps its text height)."""
    short, long = min(height, width), max(height, width)
    if short < DETECT_MIN_SHORT_SIDE:
        return "min", DETECT_MIN_SHORT_SIDE
    ratio = max(DETECT_MIN_SHORT_SIDE / short, min(1.0, DETECT_MAX_LONG_SIDE / long))
    return "max", round(long * ratio)


@dataclass(frozen=True, slots=True)
class DetectedPage:
    """A page's text boxes and their crops, with the recogniser's batches (crops sorted by length over height,
    `REC_BATCH` at a time, as RapidOCR's recogniser groups them): recognising a batch gives exactly what a full
    read gives for its boxes, whichever batches are recognised and in whatever order."""

    boxes: np.ndarray  # (N, 4, 2) float32 corners in page pixels, in RapidOCR's reading order
    crops: list[np.ndarray]
    batches: list[list[int]]


def detect(bgr: np.ndarray) -> DetectedPage:
    """Text boxes of a BGR page, cropped and grouped as RapidOCR's recogniser would batch them."""
    from rapidocr.ch_ppocr_det.utils import DetPreProcess
    from rapidocr.utils.process_img import get_rotate_crop_image

    engine = _engine()
    detector = engine._load_det_model()
    # TextDetector.__call__'s steps, with this page's scale rule instead of the detector's shared attributes
    limit_type, limit_side_len = detector_limit(*bgr.shape[:2])
    tensor = DetPreProcess(limit_side_len, limit_type, detector.mean, detector.std)(bgr)
    boxes = np.zeros((0, 4, 2), np.float32)
    if tensor is not None:
        found, _ = detector.postprocess_op(_probability_map(detector, tensor), bgr.shape[:2])
        del tensor
        if len(found):
            boxes = detector.sorted_boxes(found)
    crops = [get_rotate_crop_image(bgr, np.array(box, np.float32)) for box in boxes]
    order = np.argsort(np.array([c.shape[1] / float(c.shape[0]) for c in crops]))  # as TextRecognizer sorts
    size = engine._load_rec_model().rec_batch_num
    batches = [[int(i) for i in order[k:k + size]] for k in range(0, len(order), size)]
    return DetectedPage(boxes, crops, batches)


def _probability_map(detector: object, tensor: np.ndarray) -> np.ndarray:
    """The detector's output for one page: RapidOCR's detection model, as its OpenVINO session read it, compiled
    for exactly this page's input shape, its buffers released once the map is out.

    Why: on the machine it was chosen on OpenVINO took under half the CPU of ONNX Runtime for the same map (the
    compile included; on the shared real specimens, one core: 0.52 s a page against 0.99 s); on an AMD EPYC with
    AVX-512 ONNX Runtime detects quicker (0.22 s against 0.31 s), but the whole reading is no quicker for it (1.14 s
    a page either way). The maps differ by ~1e-5 in full precision. Compiled for a dynamic shape, as RapidOCR's
    session is, it keeps buffers for the largest page it has seen (+0.5-1 GB on real pages), whereas a model
    compiled for one shape plans its memory for that shape and gives it back on `release_memory`. The last shape's
    compiled model is kept (~40 MB without its buffers), as pages of one scanner or phone share a shape and a
    compile costs about as much as the inference. A thread takes the model it runs out of the cache, so no two
    threads ever run or release one model at once."""
    shape = tuple(tensor.shape)
    with _lock:
        if not _openvino:
            import openvino

            core = openvino.Core()
            # no pinning: the recogniser and the prepare workers run on the same cores. Full precision: on a CPU
            # with bfloat16 instructions (AVX512_BF16, AMX) OpenVINO would otherwise infer in bfloat16, whose map
            # differs from ONNX Runtime's by ~0.1 and moves boxes, so one page would read otherwise by machine.
            core.set_property("CPU", {"INFERENCE_NUM_THREADS": usable_cores(), "ENABLE_CPU_PINNING": False,
                                      "INFERENCE_PRECISION_HINT": "f32"})
            _openvino.append(core)
        compiled = _compiled.pop(shape, None)
        model = detector.session.model.clone() if compiled is None else None
    if compiled is None:
        model.reshape(list(shape))
        compiled = _openvino[0].compile_model(model, "CPU")
    request = compiled.create_infer_request()
    request.infer([tensor])
    found = request.get_output_tensor().data.copy()
    del request
    compiled.release_memory()
    with _lock:
        _compiled.clear()
        _compiled[shape] = compiled
    return found


def recognise(page: DetectedPage, batch: Sequence[int]) -> list[OcrLine | None]:
    """One line per box of `batch`, None where RapidOCR would drop it (empty text or a score below its
    `text_score`)."""
    if not batch:
        return []
    from rapidocr.ch_ppocr_rec import TextRecInput

    engine = _engine()
    # per-character probabilities come from the same decode (no extra inference): `word_results[k].confs`
    result = engine._load_rec_model()(TextRecInput(img=[page.crops[i] for i in batch], return_word_box=True))
    min_score = engine.cfg.Global.text_score
    return [OcrLine(text=text, score=float(score), box=tuple((float(x), float(y)) for x, y in page.boxes[i]),
                    char_scores=char_scores(text, words))
            if text.strip() and score >= min_score else None
            for text, score, words, i in zip(result.txts, result.scores, result.word_results, batch, strict=True)]


def recognise_strip(bgr: np.ndarray) -> tuple[str, float, object]:
    """Text, score and word result (per-character probabilities) of one line image (BGR), by the shared
    engine's recogniser, exactly as RapidOCR recognises an image without detection: first brought within its
    30-2000 px side bounds, no score filter."""
    from rapidocr.ch_ppocr_rec import TextRecInput
    from rapidocr.utils.process_img import resize_image_within_bounds

    engine = _engine()
    image, _, _ = resize_image_within_bounds(bgr, engine.cfg.Global.min_side_len, engine.cfg.Global.max_side_len)
    result = engine._load_rec_model()(TextRecInput(img=[image], return_word_box=True))
    if not result.txts:
        return "", 0.0, None
    return result.txts[0], float(result.scores[0]), result.word_results[0] if result.word_results else None


def char_scores(text: str, words: object) -> tuple[float, ...]:
    """The recogniser's probability of each character of `text` (its CTC decode keeps one per character);
    empty when the decode gave none or not one per character."""
    confs = tuple(float(c) for c in getattr(words, "confs", None) or ())
    return confs if len(confs) == len(text) else ()


def read_all(bgr: np.ndarray) -> list[OcrLine]:
    """Every line on a BGR page, in reading order (a full read)."""
    page = detect(bgr)
    found = {i: line for batch in page.batches for i, line in zip(batch, recognise(page, batch), strict=True)}
    return [found[i] for i in sorted(found) if found[i] is not None]
