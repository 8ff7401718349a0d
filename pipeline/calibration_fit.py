"""Fitting a calibration table from observations: (evidence class, raw score, right or wrong) per present field.

Per class, pool-adjacent-violators gives the isotonic step function from raw score to the share of right values,
each step smoothed as (right + 1) / (seen + 2) so a class seen 40 times right is not called certain. Used by
`tools/fit_calibration.py` (the shipped embedded table) and by `idflow calibrate` (a user's own table).
"""

from __future__ import annotations

UNSEEN_CAP = 0.9


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


def fit(observations: list[dict]) -> dict:
    classes: dict[str, list[tuple[float, bool]]] = {}
    for o in observations:
        classes.setdefault(o["class"], []).append((float(o["raw"]), bool(o["correct"])))
    table = {}
    for name, points in sorted(classes.items()):
        blocks = isotonic(points)
        values, best = [], 0.0
        for _, right, seen in blocks:
            best = max(best, (right + 1) / (seen + 2))  # smoothing can break monotonicity: keep it
            values.append(round(best, 4))
        table[name] = {"edges": [0.0] + [b[0] for b in blocks[1:]], "values": values,
                       "counts": [b[2] for b in blocks]}
    return {"version": 1, "unseen_cap": UNSEEN_CAP,
            "fitted_on": sorted({f"{o['manifest']}" for o in observations}),
            "observations": len(observations), "classes": table}
