#!/usr/bin/env python
"""What the embedded backend's second passes cost, and on how many pages of a set they run.

    python bench/bench_second_passes.py MANIFEST [--root DIR] [--limit N]

Each page of the manifest is prepared and read by the backend exactly as a run reads it (`OcrBackend.read`,
raw scores). The second passes are timed where `ocr.read_page` calls them: the MRZ re-reading (`second_reading`:
the zone cut out and re-recognised, and the search for a zone at 90° to the page), the PRC number's line
(`cn_number_reread`) and the printed name lines on dark or small captures (`name_reread`). Each runs only on the
pages that need it; the bench prints per pass how many pages it ran on, what it changed, seconds per such page,
and its share of the whole reading time over the set.
"""

from __future__ import annotations

import argparse
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
from pipeline.extract.ocr import cn_number_reread, name_reread
from pipeline.extract.ocr.backend import OcrBackend  # noqa: E402
from pipeline.ingest.discover import sha256_file  # noqa: E402
from pipeline.ops.evaluation import load_manifest  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifest", type=Path)
    ap.add_argument("--root", type=Path, default=None, help="folder the manifest's paths are relative to")
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args(argv)
    passes: dict[str, Timed] = {
        "MRZ re-reading (incl. a zone at 90°)": Timed(ocr, "second_reading"),
        "PRC number line": Timed(cn_number_reread, "second_reading"),
        "printed name lines": Timed(name_reread, "reread_name"),
    }
    backend, settings = OcrBackend(calibrated=False, today=date.today()), Settings()
    read_seconds: list[float] = []
    for item in load_manifest(args.manifest, args.root)[:args.limit]:
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        read_seconds.append(_timed(lambda: backend.read(prepared)))
    pages, total = len(read_seconds), sum(read_seconds)
    if not pages:
        print("no pages")
        return 1
    print(f"{pages} pages; whole reading: {total / pages:.2f} s a page on average")
    for name, timed in passes.items():
        ran = len(timed.seconds)
        line = f"{name}: ran on {ran} of {pages} pages ({ran / pages:.0%}), changed the reading of {timed.changed}"
        if ran:
            line += (f"; {statistics.median(timed.seconds):.2f} s median, {statistics.mean(timed.seconds):.2f} s "
                     f"mean a page it ran on; {sum(timed.seconds) / total:.1%} of the whole reading time")
        print(line)
    return 0


def _timed(call: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


if __name__ == "__main__":
    raise SystemExit(main())
