"""blitzid's side of bench/bench_blitzid.py: runs in blitzid's own venv, never in idflow's.

Protocol: one image path per stdin line in, one JSON line per path out:
{"ms": wall ms of MRZReader.read, "cpu_ms": the process's CPU ms over it, "mrz": {surname, given_names, document_number, expiry_date} or null,
 "error": the MRZError's text or null}.
Why a long-lived process: blitzid's imports and its RapidOCR engine (model loading) are then paid once, as
idflow's warm engine pays its own once. The page is timed here, in the reader's own process, so the pipe to the
bench is not part of the figure. `MRZReader.read(path)` is blitzid's public entry point: image loading, RapidOCR
over the whole page (detection, line classifier, recognition), then its zone selection and check digits; a zone
that does not validate raises MRZError, which is a page with no fields here.

Models: blitzid's RapidOCRReader passes `BLITZID_MODELS_DIR/rapidocr` to RapidOCR as its model root and
RapidOCR downloads whatever that folder lacks. When the variable is unset, this worker points it at a temporary
folder whose `rapidocr` entry links to the models the rapidocr package ships, so nothing is downloaded.
Stdlib + blitzid (+ rapidocr) only: idflow is not installed in this venv.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

MRZ_KEYS = ("surname", "given_names", "document_number", "expiry_date")


def shipped_models_dir() -> str:
    """A folder whose `rapidocr` entry is the rapidocr package's own models folder."""
    import rapidocr

    folder = tempfile.mkdtemp(prefix="blitzid-models-")
    os.symlink(Path(rapidocr.__file__).parent / "models", Path(folder) / "rapidocr")
    return folder


def read(reader: Any, path: str) -> dict[str, Any]:
    """One page through blitzid's public MRZ entry point, as a user calls it."""
    from blitzid import MRZError

    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        record, error = reader.read(path), None
    except MRZError as exc:
        record, error = None, str(exc)
    ms, cpu_ms = (time.perf_counter() - started) * 1000, (time.process_time() - cpu_started) * 1000
    fields = None if record is None else {k: asdict(record)[k] for k in MRZ_KEYS}
    return {"ms": ms, "cpu_ms": cpu_ms, "mrz": fields, "error": error}


def main() -> None:
    os.environ.setdefault("BLITZID_MODELS_DIR", shipped_models_dir())
    from blitzid import MRZReader

    reader = MRZReader(log_level=logging.WARNING)
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    for line in sys.stdin:
        print(json.dumps(read(reader, line.rstrip("\n"))), flush=True)


if __name__ == "__main__":
    main()
