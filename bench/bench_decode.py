"""Decoding at the size needed: CPU of a full decode vs a reduced one, on an 11 MP phone photo and an A4 flatbed.

    python bench/bench_decode.py [--repeat N]

Prints, per page, the CPU milliseconds (one thread, median of N) of
- the decode alone: full size, and at the DCT scale the VLM working size (1600 px) allows;
- the working page (decode, flatbed crop, cap to the working size) as `prepare` makes it now, and as it was made
  before reduced decodes (full decode, crop search on it, crop, cap), for a VLM run and an embedded OCR run.
The pages are generated here (synth), so the figures are comparable between machines; on a shared machine
compare the ratios, not the absolute figures.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.datamodel import DocumentRef  # noqa: E402
from pipeline.ingest.containers import open_page  # noqa: E402
from pipeline.ingest.discover import sha256_file  # noqa: E402
from pipeline.prepare import FULL_MAX_LONG_EDGE, _working_page  # noqa: E402
from pipeline.prepare.crop import find_document  # noqa: E402
from pipeline.prepare.load import load_page  # noqa: E402
from pipeline.prepare.resize import cap_long_edge, capped_size  # noqa: E402
from pipeline.settings import PrepareSettings  # noqa: E402
from synth import conditions as C  # noqa: E402
from synth import render as R  # noqa: E402
from synth.identities import random_mrz_person  # noqa: E402

SETTINGS = PrepareSettings()


def pages(folder: Path) -> list[Path]:
    """A 4000x3000 phone photo of a card filling most of the frame, and a 4000 px A4 scan with a card in a corner."""
    card = R.id_card_td1(random_mrz_person(random.Random(3), kind="id_card")).image
    table = np.random.default_rng(7).integers(80, 150, (375, 500, 3), dtype=np.uint8)
    photo = Image.fromarray(table).resize((4000, 3000), Image.Resampling.BILINEAR)
    big = card.resize((3400, round(3400 * card.height / card.width)), Image.Resampling.BICUBIC)
    photo.paste(big, (300, (3000 - big.height) // 2))
    photo.save(folder / "photo_4000x3000.jpg", quality=90)
    C.flatbed(card, random.Random(11)).save(folder / "flatbed_2828x4000.jpg", quality=92)
    return [folder / "photo_4000x3000.jpg", folder / "flatbed_2828x4000.jpg"]


def full_decode_working(ref: DocumentRef, working_edge: int) -> np.ndarray:
    """The working page as it was made before reduced decodes."""
    full = load_page(ref, SETTINGS)
    box = find_document(full) if max(full.shape[:2]) > max(FULL_MAX_LONG_EDGE, SETTINGS.max_long_edge) else None
    if box is not None:
        full = full[box[1]:box[3], box[0]:box[2]]
    return cap_long_edge(full, working_edge)


def cpu_ms(work: Callable[[], object], repeat: int) -> float:
    work()  # warm-up
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        work()
        times.append(time.thread_time() - started)
    return statistics.median(times) * 1000


def report(path: Path, repeat: int) -> None:
    data, ref = path.read_bytes(), DocumentRef(path, path.name, sha256_file(path))
    w, h = Image.open(path).size
    vlm_edge, ocr_edge = SETTINGS.max_long_edge, max(FULL_MAX_LONG_EDGE, SETTINGS.max_long_edge)
    vlm_size = capped_size(w, h, vlm_edge)
    reduced = open_page(data, 0, SETTINGS, min_size=vlm_size)
    print(f"{path.name}:")
    print(f"  decode: full {w}x{h} {cpu_ms(lambda: open_page(data, 0, SETTINGS), repeat):.1f} ms; "
          f"for {vlm_size[0]}x{vlm_size[1]} at {reduced.width}x{reduced.height} "
          f"{cpu_ms(lambda: open_page(data, 0, SETTINGS, min_size=vlm_size), repeat):.1f} ms")
    for label, keep_full, edge in (("VLM", False, vlm_edge), ("embedded OCR", True, ocr_edge)):
        now = cpu_ms(lambda: _working_page(ref, SETTINGS, keep_full), repeat)  # noqa: B023 - called right here
        before = cpu_ms(lambda: full_decode_working(ref, edge), repeat)  # noqa: B023 - called right here
        shape = _working_page(ref, SETTINGS, keep_full)[0].shape
        print(f"  working page for {label} ({shape[1]}x{shape[0]}): {now:.1f} ms now, "
              f"{before:.1f} ms with a full decode")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="idflow-bench-decode-") as tmp:
        for path in pages(Path(tmp)):
            report(path, args.repeat)


if __name__ == "__main__":
    main()
