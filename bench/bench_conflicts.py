"""What finding number conflicts costs on a big OUT: `find_conflicts` (the review queue) and `run_conflicts` (the
end of every run that stored a result) over N stored results.

Usage: python bench/bench_conflicts.py [--rows N] [--parts P] [--shared S] [--out DIR]
Writes N result rows in P Parquet parts (distinct numbers, except S numbers each on two documents with two
names), then times both calls (best of 3) and prints rows, seconds and rows/s.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.datamodel import FIELD_NAMES  # noqa: E402
from pipeline.review.conflicts import find_conflicts, run_conflicts  # noqa: E402
from pipeline.store.parquet import RESULT_SCHEMA, RESULTS, write_part  # noqa: E402


def fill(out: Path, rows: int, parts: int, shared: int) -> None:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    per_part = -(-rows // parts)
    for part in range(parts):
        start, stop = part * per_part, min(rows, (part + 1) * per_part)
        n = stop - start
        if n <= 0:
            break
        numbers = [f"E{(i % shared if i >= rows - shared else i):08d}" for i in range(start, stop)]
        columns: dict[str, list] = {f.name: [None] * n for f in RESULT_SCHEMA}
        columns.update({
            "source_path": [f"scan_{i:08d}.jpg" for i in range(start, stop)], "page": [0] * n,
            "sha256": [f"{i:064x}" for i in range(start, stop)], "doc_type": ["passport"] * n,
            "name": [f"NAME {i}" if i >= rows - shared else "SAME NAME" for i in range(start, stop)],
            "id_number": numbers, "expiry_date": [date(2031, 1, 1)] * n, "expiry_long_term": [False] * n,
            "fingerprint": ["f"] * n, "run_id": [f"run-{part}"] * n,
            "processed_at": [at + timedelta(seconds=i) for i in range(start, stop)]})
        for name in FIELD_NAMES:
            columns[f"{name}_state"], columns[f"{name}_confidence"] = ["present"] * n, [0.99] * n
        table = pa.Table.from_pydict(columns, schema=RESULT_SCHEMA)
        write_part(out, RESULTS, RESULT_SCHEMA, table, run_id=f"run-{part}", run_date=at.date(), part=0)


def best_of(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--parts", type=int, default=40)
    ap.add_argument("--shared", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp) / "out"
        t0 = time.perf_counter()
        fill(out, args.rows, args.parts, args.shared)
        print(f"wrote {args.rows} rows in {args.parts} parts in {time.perf_counter() - t0:.1f} s")
        found = len(find_conflicts(out))
        q = best_of(lambda: find_conflicts(out))
        r = best_of(lambda: run_conflicts(out, {f"run-{args.parts - 1}"}))
        print(f"find_conflicts: {found} flagged records, {q:.2f} s ({args.rows / q:,.0f} rows/s)")
        print(f"run_conflicts (end of a run): {r:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
