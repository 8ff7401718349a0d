#!/usr/bin/env python
"""What each pass of the embedded backend costs per page, and on how many pages of a set the second passes run,
against a bare RapidOCR loop over the same files.

    python bench/bench_second_passes.py MANIFEST [--root DIR] [--limit N] [--bare]

Each page of the manifest is prepared and read by the backend exactly as a run reads it (`OcrBackend.read`,
raw scores). The second passes are timed where `ocr.read_page` calls them: the MRZ re-reading (`second_reading`:
the zone cut out and re-recognised, and the search for a zone at 90° to the page), the PRC number's line
(`cn_number_reread`) and the printed name lines on dark or small captures (`name_reread`). Each runs only on the
pages that need it; the bench prints per pass how many pages it ran on, what it changed, seconds per such page,
and its share of the whole reading time over the set. The first pass is timed as its two stages: text detection
and the recognition of the boxes it reads. With `--bare`, each file as stored is also read by RapidOCR's own
`RapidOCR()(image)` (defaults: detection, line classifier, every box recognised), right after idflow reads it,
so load on a shared machine falls on both alike; the ratio of the two totals is printed. Preparation (decode,
orientation) is not timed on either side. Peak RSS is the process's (both engines loaded when `--bare`).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.datamodel import DocumentRef, Failure  # noqa: E402
from pipeline.extract.ocr import backend as ocr  # noqa: E402
from pipeline.extract.ocr import (  # noqa: E402
    cn_number_reread,
    mrz_glyphs,
    name_reread,
    rapidocr_stages,
)
from pipeline.extract.ocr.backend import OcrBackend  # noqa: E402
from pipeline.ingest.discover import sha256_file  # noqa: E402
from pipeline.ops.evaluation import load_manifest  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402
from pipeline.prepare.load import load_page  # noqa: E402
from pipeline.settings import Settings  # noqa: E402


class Timed:
    """A pass wrapped where the backend looks it up: each call's seconds, and whether its reading changed."""

    def __init__(self, owner: Any, attr: str) -> None:
        self.owner, self.attr, self.inner = owner, attr, getattr(owner, attr)
        self.seconds: list[float] = []
        self.changed = 0
        setattr(owner, attr, self)

    def __call__(self, pixels: Any, lines: Any, reading: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = self.inner(pixels, lines, reading, *args, **kwargs)
        self.seconds.append(time.perf_counter() - t0)
        after = out[0] if isinstance(out, tuple) else out
        self.changed += after is not reading
        return out


class Stage:
    """A first-pass stage wrapped where `page_read` looks it up: its seconds, summed over every call."""

    def __init__(self, owner: Any, attr: str) -> None:
        self.inner = getattr(owner, attr)
        self.seconds = 0.0
        self.calls = 0
        setattr(owner, attr, self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self.inner(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--root", type=Path, default=None, help="folder the manifest's paths are relative to")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--bare", action="store_true", help="also time a bare RapidOCR loop over the same files")
    args = ap.parse_args(argv)
    stages = {"text detection (first pass)": Stage(rapidocr_stages, "detect"),
              "recognition of the detected boxes (first pass)": Stage(rapidocr_stages, "recognise")}
    passes: dict[str, Timed] = {
        "MRZ re-reading (incl. a zone at 90°)": Timed(ocr, "second_reading"),
        "PRC number line": Timed(cn_number_reread, "second_reading"),
        "printed name lines": Timed(name_reread, "reread_name"),
        "zone name by a second reader (glyphs)": Timed(mrz_glyphs, "with_name_check"),
    }
    backend, settings = OcrBackend(today=date.today()), Settings()
    read_seconds: list[float] = []
    bare_seconds: list[float] = []
    bare = _bare_engine() if args.bare else None
    for item in load_manifest(args.manifest, args.root)[:args.limit]:
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        read_seconds.append(_timed(lambda: backend.read(prepared)))
        if bare is not None:
            stored = load_page(ref, settings.prepare)[:, :, ::-1].copy()  # the file as stored, OpenCV's BGR
            bare_seconds.append(_timed(lambda: bare(stored)))
    pages, total = len(read_seconds), sum(read_seconds)
    if not pages:
        print("no pages")
        return 1
    print(f"{pages} pages; whole reading: {total / pages:.2f} s a page on average "
          f"(median {statistics.median(read_seconds):.2f} s)")
    for name, stage in stages.items():
        print(f"{name}: {stage.seconds / pages:.2f} s a page ({stage.seconds / total:.1%} of the reading time)")
    for name, timed in passes.items():
        ran = len(timed.seconds)
        line = f"{name}: ran on {ran} of {pages} pages ({ran / pages:.0%}), changed the reading of {timed.changed}"
        if ran:
            line += (f"; {statistics.median(timed.seconds):.3f} s median, {statistics.mean(timed.seconds):.3f} s "
                     f"mean a page it ran on; {sum(timed.seconds) / total:.1%} of the whole reading time")
        print(line)
    if bare_seconds:
        print(f"bare RapidOCR loop: {sum(bare_seconds) / pages:.2f} s a page on average (median "
              f"{statistics.median(bare_seconds):.2f} s); idflow's reading / bare: {total / sum(bare_seconds):.2f}x")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


def _bare_engine() -> Any:
    from rapidocr import RapidOCR

    return RapidOCR(params={"Global.log_level": "error"})


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


if __name__ == "__main__":
    raise SystemExit(main())
