#!/usr/bin/env python
"""Cost and effect of the printed-name second reading (`pipeline/backends/name_reread.py`).

    python bench/bench_name_reread.py MANIFEST [--limit N]

Per page: the first pass as `ocr.read_page` runs it (both directions when unsure, the MRZ second reading when
needed); then, only on pages `name_reread` selects (name unreadable or unconfirmed, on a dark or small page), the
name re-read, timed. Prints how many pages it ran on, seconds per such page, and on how many it confirmed the
zone's name (or gave a name to a page without a zone). No names are printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from pipeline.backends import name_reread, ocr, page_read, zone_only  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.datamodel import DocumentRef, Failure  # noqa: E402
from pipeline.evaluation import load_manifest  # noqa: E402
from pipeline.ingest import sha256_file  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    settings, today = Settings(), date.today()
    pages, needy, changed, seconds = 0, 0, 0, []
    for item in load_manifest(args.manifest)[:args.limit]:
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        pages += 1
        pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
        pixels = zone_only.prepared(pixels) if zone_only.prepared(pixels) is not None else pixels
        lines, reading = page_read.read_lines(pixels, today)
        if not reading.checks and prepared.orientation_confidence < ocr.SURE_DIRECTION:
            flipped = np.ascontiguousarray(pixels[::-1, ::-1])
            f_lines, f_reading = page_read.read_lines(flipped, today)
            if f_reading.score > reading.score:
                pixels, lines, reading = flipped, f_lines, f_reading
        if ocr.needs_second_reading(reading):
            reading, lines = ocr.second_reading(pixels, lines, reading, today)
        selected = name_reread.needs_reread(reading) and name_reread.poor_capture(pixels, max(prepared.original_size))
        if not selected:
            continue
        needy += 1
        t0 = time.perf_counter()
        after = name_reread.reread_name(pixels, lines, reading, today, ocr.recognise_line)
        seconds.append(time.perf_counter() - t0)
        changed += after is not reading
        print(f"{item.rel_path}: re-read {seconds[-1]:.2f} s, {'confirmed' if after is not reading else 'unchanged'}")
    print(f"{pages} pages; name re-read on {needy} ({needy / max(pages, 1):.0%}), name confirmed/read on {changed}")
    if seconds:
        print(f"re-read per such page: median {statistics.median(seconds):.2f} s, mean {statistics.mean(seconds):.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
