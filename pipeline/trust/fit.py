"""Fitting a calibration table from observations: (evidence class, raw score, right or wrong) per present field.

Per class, pool-adjacent-violators gives the isotonic step function from raw score to the share of right values,
and each step maps to the *lower end of the 95% Wilson interval* of its share (made non-decreasing): a step is
raised only as far as its observations vouch for, so a class seen 40 times right gets 0.91, not 0.98, and
passing the documented threshold 0.95 takes at least 73 observations with none wrong (`wilson`). Every class
also states its observations, how many were right and the 95% interval of its share right. Used by
`tools/fit_calibration.py` (the shipped embedded table) and by `idflow calibrate` (a user's own table).

The shipped table also asks each class for `SHIPPED_MIN_OBSERVATIONS` observations before any of its steps may
go above `UNSEEN_CAP` (`min_observations`): a class seen fewer times on generated tuning pages says too little
about how it does on a scanner's pages, whatever its interval, so it stays capped like a class never seen, and
the table says so (`capped`).
"""

from __future__ import annotations

import math
from typing import Any

UNSEEN_CAP = 0.9
SHIPPED_MIN_OBSERVATIONS = 300  # a shipped class seen fewer times stays capped at UNSEEN_CAP
Z95 = 1.959964  # two-sided 95%


def wilson(right: int, seen: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a share right/seen (95% by default); (0, 1) for nothing seen."""
    if seen <= 0:
        return 0.0, 1.0
    p, z2 = right / seen, z * z
    centre = (p + z2 / (2 * seen)) / (1 + z2 / seen)
    half = z * math.sqrt(p * (1 - p) / seen + z2 / (4 * seen * seen)) / (1 + z2 / seen)
    return max(0.0, centre - half), min(1.0, centre + half)


def isotonic(points: list[tuple[float, bool]]) -> list[tuple[float, int, int]]:
    """Pool adjacent violators over (raw, right) sorted by raw: blocks (lowest raw, right, seen) whose
    right/seen ratio is non-decreasing."""
    blocks: list[list[float]] = []  # [lowest raw, right, seen]
    for raw, right in sorted(points):
        if blocks and blocks[-1][0] == raw:
            blocks[-1][1] += right
            blocks[-1][2] += 1
        else:
            blocks.append([raw, float(right), 1.0])
        while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
            _, k, n = blocks.pop()
            blocks[-1][1] += k
            blocks[-1][2] += n
    return [(b[0], int(b[1]), int(b[2])) for b in blocks]


def fit(observations: list[dict], key: dict[str, Any] | None = None, min_observations: int = 0) -> dict:
    """The table for `observations` (dicts with `class`, `raw`, `correct`, `manifest`); `key` (backend, model,
    prompt) says what it was fitted for. A class with fewer than `min_observations` keeps its steps at or below
    `UNSEEN_CAP` (`capped`)."""
    classes: dict[str, list[tuple[float, bool]]] = {}
    for o in observations:
        classes.setdefault(o["class"], []).append((float(o["raw"]), bool(o["correct"])))
    table = {}
    for name, points in sorted(classes.items()):
        blocks = isotonic(points)
        values, best = [], 0.0
        for _, right, seen in blocks:
            best = max(best, wilson(right, seen)[0])  # the lower ends need not rise: keep the curve monotone
            values.append(math.floor(best * 10000) / 10000)  # rounded down: never above what was measured
        capped = len(points) < min_observations
        if capped:
            values = [min(v, UNSEEN_CAP) for v in values]
        right = sum(b[1] for b in blocks)
        low, high = wilson(right, len(points))
        table[name] = {"edges": [0.0] + [b[0] for b in blocks[1:]], "values": values,
                       "counts": [b[2] for b in blocks], "right": [b[1] for b in blocks],
                       "observations": len(points), "right_total": right,
                       "interval95": [round(low, 4), round(high, 4)], "capped": capped}
    return {"version": 2, **({"key": key} if key is not None else {}), "unseen_cap": UNSEEN_CAP,
            "min_observations": min_observations,
            "value_rule": "lower end of the 95% Wilson interval of each isotonic step's share right; a class with "
                          "fewer than min_observations stays at or below unseen_cap",
            "fitted_on": sorted({f"{o['manifest']}" for o in observations}),
            "observations": len(observations), "classes": table}
