"""The input folder handed to a flow by reference, so its name (which can hold an ID number) is not stored in
the flow run's parameters, name, an event or the Prefect database.

Two kinds, both resolved by the flow from a file inside OUT (which holds personal data anyway, `OUT/sources/`):
- `idflow-source:<token>`: `idflow run` writes `pending-<token>.json` for the one flow run it starts and deletes
  it when the run is over (`register`, `forget`).
- `idflow-upload:<token>`: a lasting reference for flow runs that deployments start (`idflow watch`'s upload
  event, a nightly child): `upload-<token>.json`, kept, so a run retried from the UI still finds its folder. The
  token is the same for the same folder every time (a re-sent event is the same event; nightly recognises a
  folder in flight) and is a digest keyed with OUT's own random key (`upload-key`), so the folder's name cannot
  be guessed back from it by trying ID numbers.
A plain path (a test, a flow started by hand) is taken as it is."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
import uuid
from pathlib import Path

from pipeline.store.atomic import write_json_atomic
from pipeline.store.parquet import SOURCES, path_bytes, readable_path

PREFIX = "idflow-source:"
UPLOAD_PREFIX = "idflow-upload:"
_KEY_FILE = "upload-key"


def register(out_dir: Path, folder: Path) -> str:
    """The reference a flow resolves to `folder` (absolute), valid until `forget`."""
    token = uuid.uuid4().hex
    exact = str(folder.resolve())
    write_json_atomic(_pending(out_dir, token), {"input_dir": readable_path(exact),
                                                 "input_dir_hex": path_bytes(exact).hex()})
    return PREFIX + token


def folder_reference(out_dir: Path, folder: Path) -> str:
    """The lasting reference to `folder` (absolute) for a flow run a deployment starts (see the module)."""
    exact = str(folder.resolve())
    token = hmac.new(_key(out_dir), path_bytes(exact), hashlib.sha256).hexdigest()[:32]
    write_json_atomic(_upload(out_dir, token), {"input_dir": readable_path(exact),
                                                "input_dir_hex": path_bytes(exact).hex()})
    return UPLOAD_PREFIX + token


def resolve(out_dir: Path, input_dir: str) -> Path:
    """The folder `input_dir` names: a reference idflow wrote into `out_dir`, or a path. A reference whose file
    is not in `out_dir` is a ValueError saying so (the watcher and the deployment name different OUTs)."""
    for prefix, where in ((PREFIX, _pending), (UPLOAD_PREFIX, _upload)):
        if input_dir.startswith(prefix):
            token = input_dir[len(prefix):]
            if not token.isalnum():
                raise ValueError(f"{input_dir} is not a folder reference idflow wrote")
            try:
                data = json.loads(where(out_dir, token).read_text(encoding="utf-8"))
            except FileNotFoundError:
                raise ValueError(f"folder reference {input_dir} is not in {out_dir / SOURCES}: the run must "
                                 "write the OUT the reference was made for (`idflow watch --out`)") from None
            return Path(os.fsdecode(bytes.fromhex(data["input_dir_hex"])))
    return Path(input_dir)



def forget(out_dir: Path, reference: str) -> None:
    with contextlib.suppress(OSError):
        _pending(out_dir, reference[len(PREFIX):]).unlink()


def _pending(out_dir: Path, token: str) -> Path:
    return out_dir / SOURCES / f"pending-{token}.json"


def _upload(out_dir: Path, token: str) -> Path:
    return out_dir / SOURCES / f"upload-{token}.json"


def _key(out_dir: Path) -> bytes:
    """OUT's random key for upload references, made once (the first writer wins; the others read it)."""
    path = out_dir / SOURCES / _KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        for _ in range(100):  # written by another process a moment ago: its 64 hex digits arrive at once
            text = path.read_text(encoding="ascii").strip()
            if len(text) == 64:
                return bytes.fromhex(text)
            time.sleep(0.01)
        raise ValueError(f"{path} is damaged: delete it (upload references made with it no longer resolve)")
    with os.fdopen(fd, "w", encoding="ascii") as fh:
        fh.write(secrets.token_hex(32))
        fh.flush()
        os.fsync(fh.fileno())
    return bytes.fromhex(path.read_text(encoding="ascii").strip())
