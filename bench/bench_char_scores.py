#!/usr/bin/env python
"""What the per-character recognition scores cost (the PRC name's evidence, `fields.lines.value_score`).

    python bench/bench_char_scores.py MANIFEST [--root FOLDER] [--limit N] [--repeat R]

Per page: the text boxes are detected once, then every recogniser batch is recognised `R` times with and `R`
times without `return_word_box` (the per-character probabilities come from the same CTC decode; no extra
inference), alternating so load changes hit both alike. Prints the median recognition time per page both ways
and the difference. Run it pinned to one core (`taskset -c 0`) for the one-core figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.datamodel import DocumentRef, Failure  # noqa: E402
from pipeline.extract.ocr import rapidocr_stages  # noqa: E402
from pipeline.ingest.discover import sha256_file  # noqa: E402
from pipeline.ops.evaluation import load_manifest  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402
from pipeline.settings import Settings  # noqa: E402


def _recognise_all(page: rapidocr_stages.DetectedPage, word_box: bool) -> float:
    from rapidocr.ch_ppocr_rec import TextRecInput

    rec = rapidocr_stages._engine()._load_rec_model()
    started = time.perf_counter()
    for batch in page.batches:
        rec(TextRecInput(img=[page.crops[i] for i in batch], return_word_box=word_box))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--root", type=Path, default=None, help="the pages' folder (default: the manifest's)")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    settings = Settings()
    plain, scored = [], []
    for item in load_manifest(args.manifest, args.root)[:args.limit]:
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
        page = rapidocr_stages.detect(np.ascontiguousarray(pixels[:, :, ::-1]))
        a, b = [], []
        for _ in range(args.repeat):
            a.append(_recognise_all(page, False))
            b.append(_recognise_all(page, True))
        plain.append(min(a))
        scored.append(min(b))
    if not plain:
        print("no page prepared")
        return 1
    p, s = statistics.median(plain) * 1000, statistics.median(scored) * 1000
    print(f"{len(plain)} pages: recognition per page, median of the best of {args.repeat}: "
          f"{p:.0f} ms without, {s:.0f} ms with per-character scores ({s - p:+.1f} ms, {(s - p) / p:+.1%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
