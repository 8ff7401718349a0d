"""PassportEye's side of bench/bench_passporteye.py: runs in PassportEye's own venv, never in idflow's.

Protocol: one image path per stdin line in, one JSON line per path out:
{"ms": wall ms of read_mrz + to_dict, "mrz": {surname, names, number, expiration_date} or null}.
Why a long-lived process: PassportEye's imports (scikit-image, scipy) are then paid once, as idflow's warm engine
pays its model loading once; pytesseract still starts one Tesseract process per OCR call, and that is
PassportEye's real per-page cost, so it stays inside the timing. The page is timed here, in the reader's
own process, so the pipe to the bench is not part of the figure.
Stdlib + passporteye only: idflow is not installed in this venv.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from typing import Any

from passporteye import read_mrz

MRZ_KEYS = ("surname", "names", "number", "expiration_date")


def read(path: str) -> dict[str, Any]:
    """One page through PassportEye's public entry point, as a user calls it."""
    started = time.perf_counter()
    mrz = read_mrz(path)
    fields = None if mrz is None else mrz.to_dict()
    ms = (time.perf_counter() - started) * 1000
    return {"ms": ms, "mrz": None if fields is None else {k: fields.get(k) for k in MRZ_KEYS}}


def main() -> None:
    # scikit-image deprecation warnings raised inside PassportEye on every page would bury the bench's output.
    warnings.simplefilter("ignore", FutureWarning)
    for line in sys.stdin:
        print(json.dumps(read(line.rstrip("\n"))), flush=True)


if __name__ == "__main__":
    main()
