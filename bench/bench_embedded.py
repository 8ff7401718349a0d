"""Embedded path throughput: idflow's full prepare -> OCR -> validate vs a bare RapidOCR loop, plus peak RSS.

Usage: taskset -c 1 env OMP_NUM_THREADS=1 python bench/bench_embedded.py [FOLDER] [--repeat N]
Prints documents/s for both loops over the same readable pages, per-document median latency, their ratio
(idflow docs/s / bare docs/s) and peak RSS. The bare loop is the floor: what RapidOCR alone costs on each file
as stored, with no orientation, no budget resize, no parsing and no validation.
Why the loops alternate page by page (bare, idflow, bare, idflow, ...): the machine is shared, and load from
other processes then falls on both loops alike instead of on whichever ran during a busy minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from pathlib import Path

import numpy as np

from pipeline.datamodel import DocumentRef
from pipeline.extract.factory import make_backend
from pipeline.ingest.containers import ContainerError
from pipeline.ingest.discover import Discovery
from pipeline.prepare.load import load_page
from pipeline.run.engine import Engine
from pipeline.settings import PrepareSettings, Settings


def readable_refs(folder: Path) -> list[DocumentRef]:
    """Pages both loops can decode (the bad sample files would only measure the failure path)."""
    refs = []
    for item in Discovery(folder).items():
        if isinstance(item, DocumentRef):
            try:
                load_page(item, PrepareSettings())
            except ContainerError:
                continue
            refs.append(item)
    return refs


def bgr_page(ref: DocumentRef) -> np.ndarray:
    """The file as stored, in OpenCV's channel order: the bare loop's input (decoding is not timed)."""
    return load_page(ref, PrepareSettings())[:, :, ::-1].copy()


async def alternate(refs: list[DocumentRef]) -> tuple[list[float], list[float]]:
    """Seconds per page for the bare loop and for idflow, each page read by one then the other."""
    from rapidocr import RapidOCR

    bare = RapidOCR(params={"Global.log_level": "error"})
    settings = Settings(concurrency=1)
    bare_times, idflow_times = [], []
    async with Engine(settings, make_backend(settings), prepare_workers=1) as engine:
        bare(bgr_page(refs[0]))  # warm-up for both: the pipeline's engine is warm in a run too
        await engine.one(refs[0])
        for ref in refs:
            pixels = bgr_page(ref)
            started = time.perf_counter()
            bare(pixels)
            bare_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            await engine.one(ref)
            idflow_times.append(time.perf_counter() - started)
    return bare_times, idflow_times


def report(label: str, times: list[float]) -> None:
    print(f"{label:>22}: {len(times) / sum(times):6.2f} docs/s  median {statistics.median(times) * 1000:7.0f} ms"
          f"  p95 {sorted(times)[int(0.95 * (len(times) - 1))] * 1000:7.0f} ms  (n={len(times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="data/sample", type=Path)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    refs = readable_refs(args.folder) * args.repeat
    print(f"{len(refs)} pages from {args.folder}, {os.cpu_count()} cores, affinity {sorted(os.sched_getaffinity(0))}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load avg {os.getloadavg()[0]:.2f}")
    bare_times, idflow_times = asyncio.run(alternate(refs))
    report("bare RapidOCR loop", bare_times)
    report("idflow embedded path", idflow_times)
    print(f"ratio (idflow docs/s / bare docs/s): {sum(bare_times) / sum(idflow_times):.2f}x  "
          f"load avg after {os.getloadavg()[0]:.2f}")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
