"""`idflow run` as a real subprocess, for tests of what a user's shell sees: its environment without a Prefect
API (so the run starts or joins the local server), the servers left behind, and unique scans to feed it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parent.parent.parent
SERVER_MODULE = b"flows.local_server"


def run_env(tmp: Path, *, set_up_database: bool = True, **extra: str) -> dict[str, str]:
    """The environment of a run with no Prefect API configured and a Prefect home of its own under `tmp`; its
    local server stops as soon as the last run using it ends, unless `extra` sets another idle time. The home
    gets a copy of a database a server has set up, unless `set_up_database` is False or `extra` names another
    home (`tests/support/prefect_database.py`). A model's answers are not read again by the embedded OCR unless
    `extra` turns that on: these runs prove other things, and the second reading (on by default) has tests of its
    own (`test_vlm_crosscheck.py`)."""
    from tests.support.prefect_database import copy_set_up_database

    if set_up_database and "PREFECT_HOME" not in extra:
        copy_set_up_database(tmp / "prefect-home" / "prefect.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "IDFLOW_", "TAOTOKEN_"))}
    return {**env, "PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp / "prefect-home"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1", "COLUMNS": "200",
            "IDFLOW_PREFECT_SERVER_IDLE_S": "0", "IDFLOW_OPENAI_CROSSCHECK": "false", **extra}


def idflow(*args: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """Start `idflow ARGS` (as `python -m idflow`) with stdout and stderr in `log`."""
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "idflow", *args], env=env, cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT)


def prefect_servers(prefect_home: Path) -> list[int]:
    """Pids of local Prefect server processes whose PREFECT_HOME is `prefect_home` (so only the ones our runs
    started, whatever else runs on the machine)."""
    wanted = f"PREFECT_HOME={prefect_home}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
            if SERVER_MODULE in words and wanted in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return pids


def no_server_left(prefect_home: Path) -> None:
    """Wait until the local server of `prefect_home` is gone (it stops on its own once no run uses it)."""
    from tests.support.prefect_server import wait_for

    wait_for(lambda: prefect_servers(prefect_home) == [], 60, "the local Prefect server to stop", every=0.2)


def unique_scans(folder: Path, count: int, size: tuple[int, int] = (320, 208)) -> Path:
    """`count` small PNGs with distinct content (a duplicate would be skipped, not processed)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        Image.new("RGB", size, (i % 256, (i // 256) % 256, 128)).save(folder / f"scan_{i:04d}.png")
    return folder
