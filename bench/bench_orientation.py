"""Orientation accuracy and cost on the real specimens: every image turned 0/90/180/270 and skewed 0/+-3/+-7/+-10.

Usage: python bench/bench_orientation.py [REALDATA] [--limit N] [--jobs J]

A case is right when the found rotation undoes the turn exactly and the found skew is within 2 degrees of the
applied one. Prints the count right (all specimens, and the first 43 -- the three original specimen folders,
the set of the historical 1202/1204 figure), which path decided each page (cheap line geometry, or the text
detector when the cheap signals disagreed or were unsure) and the CPU milliseconds per page on one core.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import cv2
import numpy as np

from pipeline.prepare.orient import _rotate_small, detect_orientation

ROTATIONS = (0, 90, 180, 270)
SKEWS = (0.0, 3.0, -3.0, 7.0, -7.0, 10.0, -10.0)
ORIGINAL_FOLDERS = ("arg0s1080_mrz_specimens", "midv2020_templates_via_sidtd", "cn_resident_id_synthetic")
SUFFIXES = {".png", ".jpg", ".jpeg"}


def specimens(realdata: Path) -> list[Path]:
    """Every specimen image (not the evidence screenshots), the original three folders first."""
    found = sorted(p for p in realdata.rglob("*") if p.suffix.lower() in SUFFIXES and "evidence" not in p.parts)
    return sorted(found, key=lambda p: p.relative_to(realdata).parts[0] not in ORIGINAL_FOLDERS)


def turned(upright: np.ndarray, rotation: int, skew: float) -> np.ndarray:
    """The page turned so that `rotation` then `skew` degrees clockwise undo it."""
    page = np.ascontiguousarray(np.rot90(upright, k=rotation // 90))  # np.rot90 turns counter-clockwise
    return _rotate_small(page, -skew) if skew else page


def one_specimen(path: Path) -> list[tuple[str, int, float, bool, float, str, str]]:
    """(name, rotation, skew, right, cpu seconds, path taken, what was found) for one specimen's 28 cases."""
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    upright = np.ascontiguousarray(bgr[..., ::-1])
    rows = []
    for rotation in ROTATIONS:
        for skew in SKEWS:
            page = turned(upright, rotation, skew)
            started = time.thread_time()
            found = detect_orientation(page)
            cpu = time.thread_time() - started
            right = found.rotation == rotation and abs(found.skew - skew) <= 2.0
            rows.append((path.name, rotation, skew, right, cpu, getattr(found, "method", "detector"),
                         f"found {found.rotation} {found.skew:+.1f}"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("realdata", nargs="?", default="../shared/realdata", type=Path)
    parser.add_argument("--limit", type=int, default=None, help="only the first N specimens")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (CPU time is per page anyway)")
    args = parser.parse_args()
    paths = specimens(args.realdata)[: args.limit]
    with ProcessPoolExecutor(args.jobs) as pool:
        results = list(pool.map(one_specimen, paths))
    rows = [row for rows in results for row in rows]
    original = [row for rows in results[:43] for row in rows]
    cpu = [row[4] for row in rows]
    methods: dict[str, int] = {}
    for row in rows:
        methods[row[5]] = methods.get(row[5], 0) + 1
    print(f"{len(paths)} specimens x {len(ROTATIONS)} rotations x {len(SKEWS)} skews = {len(rows)} pages")
    print(f"right: {sum(r[3] for r in rows)}/{len(rows)} all; {sum(r[3] for r in original)}/{len(original)} "
          f"on the first 43 (original folders)")
    print(f"decided by: {methods}")
    print(f"cpu per page: median {statistics.median(cpu) * 1000:.1f} ms, "
          f"p95 {sorted(cpu)[int(0.95 * (len(cpu) - 1))] * 1000:.1f} ms, mean {statistics.fmean(cpu) * 1000:.1f} ms")
    for name, rotation, skew, right, _, method, found in rows:
        if not right:
            print(f"  wrong: {name} rotation {rotation} skew {skew:+.0f}: {found} ({method})")


if __name__ == "__main__":
    main()
