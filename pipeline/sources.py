"""The input folder handed to a flow by reference, so its name (which can hold an ID number) is not stored in
the flow run's parameters, name or the Prefect database.

The command writes the exact folder into `OUT/sources/pending-<token>.json` (inside OUT, which holds personal
data anyway) and passes `idflow-source:<token>` as the flow's `input_dir`; the flow resolves it. A plain path
(a deployment started by an upload event, a test) is taken as it is."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path

from pipeline.atomic import write_json_atomic
from pipeline.store import SOURCES, path_bytes, readable_path

PREFIX = "idflow-source:"


def register(out_dir: Path, folder: Path) -> str:
    """The reference a flow resolves to `folder` (absolute), valid until `forget`."""
    token = uuid.uuid4().hex
    exact = str(folder.resolve())
    write_json_atomic(_pending(out_dir, token), {"input_dir": readable_path(exact),
                                                 "input_dir_hex": path_bytes(exact).hex()})
    return PREFIX + token


def resolve(out_dir: Path, input_dir: str) -> Path:
    """The folder `input_dir` names: a registered reference, or a path."""
    if not input_dir.startswith(PREFIX):
        return Path(input_dir)
    token = input_dir[len(PREFIX):]
    if not token.isalnum():
        raise ValueError(f"{input_dir} is not a folder reference idflow wrote")
    data = json.loads(_pending(out_dir, token).read_text(encoding="utf-8"))
    return Path(os.fsdecode(bytes.fromhex(data["input_dir_hex"])))


def forget(out_dir: Path, reference: str) -> None:
    with contextlib.suppress(OSError):
        _pending(out_dir, reference[len(PREFIX):]).unlink()


def _pending(out_dir: Path, token: str) -> Path:
    return out_dir / SOURCES / f"pending-{token}.json"
