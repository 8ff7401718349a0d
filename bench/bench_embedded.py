"""Embedded path throughput: idflow's full prepare -> OCR -> validate vs a bare RapidOCR loop, plus peak RSS.

Usage: python bench/bench_embedded.py [FOLDER] [--repeat N]
Prints documents/s for both loops over the same readable pages, per-document median latency and peak RSS.
The bare loop is the floor: what RapidOCR alone costs on each file as stored, with no orientation, no
budget resize, no parsing and no validation.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from pathlib import Path

from pipeline.config import PrepareSettings, Settings
from pipeline.containers import ContainerError
from pipeline.datamodel import DocumentRef
from pipeline.ingest import Discovery
from pipeline.prepare.load import load_page
from pipeline.backends.factory import make_backend
from pipeline.engine import Engine


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


def bare_rapidocr(refs: list[DocumentRef]) -> list[float]:
    from rapidocr import RapidOCR

    engine = RapidOCR(params={"Global.log_level": "error"})
    engine(load_page(refs[0], PrepareSettings())[:, :, ::-1].copy())  # warm-up, as the pipeline's engine is warm too
    times = []
    for ref in refs:
        pixels = load_page(ref, PrepareSettings())[:, :, ::-1].copy()
        started = time.perf_counter()
        engine(pixels)
        times.append(time.perf_counter() - started)
    return times


async def pipeline_loop(refs: list[DocumentRef]) -> list[float]:
    settings = Settings(concurrency=1)
    times = []
    async with Engine(settings, make_backend(settings), prepare_workers=1) as engine:
        await engine.one(refs[0])  # warm-up
        for ref in refs:
            started = time.perf_counter()
            await engine.one(ref)
            times.append(time.perf_counter() - started)
    return times


def report(label: str, times: list[float]) -> None:
    print(f"{label:>22}: {len(times) / sum(times):6.2f} docs/s  median {statistics.median(times) * 1000:7.0f} ms"
          f"  p95 {sorted(times)[int(0.95 * (len(times) - 1))] * 1000:7.0f} ms  (n={len(times)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="data/sample", type=Path)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    refs = readable_refs(args.folder) * args.repeat
    print(f"{len(refs)} pages from {args.folder}, {os.cpu_count()} cores, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    report("bare RapidOCR loop", bare_rapidocr(refs))
    report("idflow embedded path", asyncio.run(pipeline_loop(refs)))
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
