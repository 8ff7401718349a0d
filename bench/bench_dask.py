"""Dask mode throughput on the embedded path: the plain in-process `extract-folder` run vs `--dask local:1` and
`--dask local:2` (LocalCluster worker processes, one thread each) over the same generated documents.

Usage: python bench/bench_dask.py [--docs N] [--folder DIR] [--batch-size B] [--concurrency C]
Without --folder, N eval documents are generated (synth, seed 7) into a temporary folder. Without
PREFECT_API_URL a temporary Prefect server is started (prefect_test_harness), as for the tests.
Prints, per mode: wall time, documents/s, speed-up over plain, and the core-seconds one document costs (wall
time x cores the mode can use / documents), the figure the scale-out estimate is made from.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # synth/ is not an installed package

from pipeline.store.parquet import RESULTS, read_table  # noqa: E402


async def one_run(folder: Path, out: Path, dask: str | None, batch_size: int,
                  concurrency: int | None) -> tuple[float, dict[str, Any]]:
    from flows.extract import extract_folder

    started = time.perf_counter()
    summary = await extract_folder(str(folder), str(out), batch_size=batch_size, concurrency=concurrency,
                                   dask=dask)
    return time.perf_counter() - started, summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=120, help="documents to generate (ignored with --folder)")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=None, help="default: IDFLOW_CONCURRENCY / 4")
    parser.add_argument("--modes", default="plain,local:1,local:2")
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-dask-")))
        folder = args.folder
        if folder is None:
            from synth.sample_set import build_eval

            folder = tmp / "in"
            build_eval(folder, args.docs, 7)
            (folder / "manifest.json").unlink()
        if not os.environ.get("PREFECT_API_URL"):
            from prefect.testing.utilities import prefect_test_harness

            stack.enter_context(prefect_test_harness(server_startup_timeout=120))
        cores = os.cpu_count() or 1
        print(f"folder {folder}: {sum(1 for p in folder.rglob('*') if p.is_file())} files; {cores} cores; "
              f"batch size {args.batch_size}; concurrency {args.concurrency or 'default'}")
        baseline: float | None = None
        for mode in args.modes.split(","):
            dask = None if mode == "plain" else mode
            elapsed, summary = asyncio.run(one_run(folder, tmp / f"out-{mode.replace(':', '')}", dask,
                                                   args.batch_size, args.concurrency))
            docs = summary["results"] + summary["failures"]
            rate = docs / elapsed
            baseline = baseline or rate
            usable = cores if dask is None else min(cores, int(mode.removeprefix("local:")))
            results = read_table(tmp / f"out-{mode.replace(':', '')}", RESULTS, ["latency_ms", "worker"])
            ocr_ms = statistics.median(results.column("latency_ms").to_pylist()) if results else float("nan")
            workers = len(set(results.column("worker").to_pylist())) if results else 0
            print(f"{mode:>8}: N={docs} pages in {elapsed:6.1f} s = {rate:5.2f} docs/s, speed-up x{rate / baseline:4.2f}"
                  f", {usable * elapsed / docs:5.2f} core-s/doc, OCR median {ocr_ms:5.0f} ms, {workers} worker(s), "
                  f"accounted={summary['accounted']}")


if __name__ == "__main__":
    main()
