"""CLI contract, through `python -m idflow` in a child process: a bad sample, an unforeseen error or a damaged
part is one masked line (or a masked traceback), never the raw number."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

NUMBER_NAME = "zhang110101199003071233.jpg"


def _idflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "idflow", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO), **env})


@pytest.mark.parametrize("kind", ["missing", "folder", "device"])
def test_doctor_sample_that_is_no_file_is_one_masked_line(tmp_path: Path, kind: str) -> None:
    """A missing sample printed a traceback with the full number in its name; /dev/zero was hashed forever."""
    sample = {"missing": tmp_path / NUMBER_NAME, "folder": tmp_path / NUMBER_NAME, "device": Path("/dev/zero")}[kind]
    if kind == "folder":
        sample.mkdir()
    # the doctor wants a key set before it looks at the sample: a throwaway made now, not a literal in the code
    throwaway = {"TAOTOKEN_API_KEY": secrets.token_hex(8), "TAOTOKEN_MODEL": "m"}
    done = _idflow("doctor", "--backend", "openai", "--sample", str(sample), **throwaway)
    assert done.returncode == 2 and "not a regular file" in done.stdout, done.stdout + done.stderr
    assert "110101199003071233" not in done.stdout + done.stderr and "Traceback" not in done.stdout + done.stderr


def test_an_unforeseen_error_prints_its_traceback_masked(tmp_path: Path) -> None:
    """No command turns a run summary that is a folder into a message: the traceback is printed, masked."""
    (tmp_path / "runs" / NUMBER_NAME.replace(".jpg", ".json")).mkdir(parents=True)
    done = _idflow("show", str(tmp_path))
    assert done.returncode == 1 and "IsADirectoryError" in done.stderr, done.stdout + done.stderr
    assert "110101199003071233" not in done.stdout + done.stderr and "zhang1101" in done.stderr


@pytest.mark.parametrize("command", ["show", "review", "retry", "run"])
def test_a_damaged_part_is_one_line_for_every_command(tmp_path: Path, command: str) -> None:
    """show, review and retry printed ~200 lines of traceback for a damaged part, and run a failed flow's traceback
    before its one line: the part is now checked before any flow starts."""
    for table in ("results", "failures"):
        part = tmp_path / table / "run_date=2026-12-01" / "part-r1-00000.parquet"
        part.parent.mkdir(parents=True)
        part.write_bytes(b"PAR1 cut short")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r1.json").write_text('{"run_id": "r1", "input_dir": "/nowhere", "accounted": true}')
    args = [command, str(tmp_path)] if command != "run" else ["run", str(tmp_path / "runs"), "--out", str(tmp_path)]
    done = _idflow(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot be read" in done.stdout and "Traceback" not in done.stdout + done.stderr
