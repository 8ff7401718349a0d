"""Atomic JSON state files: written under a hidden temp name, fsynced and renamed in the same folder.

Why one helper: run summaries, shard manifests, the folder ledger, the watcher's state and the vLLM pool file
are all read by other processes; a reader must never see half of one, and a crash must never leave one.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True, default=str, ensure_ascii=False)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, or an interrupt: no half-written temp file is left beside `path`
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return path
