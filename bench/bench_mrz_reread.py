#!/usr/bin/env python
"""Speed cost of the MRZ second reading: how many pages need it and what it adds.

    python bench/bench_mrz_reread.py MANIFEST [--limit N]

Per page: the first pass (detection + recognition + parsing, both orientations when needed) is timed, then,
only on pages where `needs_second_reading` says so, the second reading. Prints the share of pages re-read,
median first-pass and second-reading times and the mean cost added per page over the whole set.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.backends import ocr  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.datamodel import DocumentRef, Failure  # noqa: E402
from pipeline.evaluation import load_manifest  # noqa: E402
from pipeline.fields.document import read_document  # noqa: E402
from pipeline.ingest import sha256_file  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    settings, today = Settings(), date.today()
    first_ms, second_ms = [], []
    for item in load_manifest(args.manifest)[:args.limit]:
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
        t0 = time.perf_counter()
        lines = ocr.ocr_lines(pixels)
        reading = read_document(lines, today)
        if not reading.checks:  # the first pass also tries the page upside down, as read_page does
            read_document(ocr.ocr_lines(pixels[::-1, ::-1].copy()), today)
        first_ms.append((time.perf_counter() - t0) * 1000)
        if ocr.needs_second_reading(reading):
            t1 = time.perf_counter()
            ocr.second_reading(pixels, lines, reading, today)
            second_ms.append((time.perf_counter() - t1) * 1000)
    n = len(first_ms)
    if not n:
        print("no pages")
        return 1
    print(f"{n} pages; second reading on {len(second_ms)} ({len(second_ms) / n:.0%})")
    print(f"first pass: median {statistics.median(first_ms):.0f} ms, mean {statistics.mean(first_ms):.0f} ms")
    if second_ms:
        print(f"second reading (pages that need it): median {statistics.median(second_ms):.0f} ms, "
              f"mean {statistics.mean(second_ms):.0f} ms")
    print(f"added per page over the set: {sum(second_ms) / n:.0f} ms "
          f"(+{sum(second_ms) / sum(first_ms):.0%} of first-pass time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
