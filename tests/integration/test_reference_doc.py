"""docs/reference.md and the settings tables of docs/configuration.md are generated from the code
(tools/gen_reference.py): they must be what the script writes now, and every code they document must have what
the tables need (a stage, plain words for the review page)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pipeline.datamodel import REASON_STAGES, Reason
from pipeline.review.queue import REASON_TEXT
from pipeline.store.parquet import FAILURE_SCHEMA, RESULT_SCHEMA
from tests.support.paths import REPO

ROOT = REPO
SCRIPT = ROOT / "tools" / "gen_reference.py"
REFERENCE = ROOT / "docs" / "reference.md"
CONFIGURATION = ROOT / "docs" / "configuration.md"


def _check(script: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), "--check"], capture_output=True, text=True, cwd=cwd,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_generated_docs_are_what_the_script_writes_now(tmp_path: Path) -> None:
    result = _check(SCRIPT, tmp_path)
    assert result.returncode == 0, result.stderr


def test_every_reason_has_a_stage_and_plain_words() -> None:
    assert set(REASON_STAGES) == set(Reason)
    assert not [r.value for r in Reason if r.value not in REASON_TEXT]


def test_every_reason_column_and_setting_appears() -> None:
    reference = REFERENCE.read_text(encoding="utf-8")
    assert all(f"`{r.value}`" in reference for r in Reason)
    assert all(f"| `{f.name}` |" in reference for f in [*RESULT_SCHEMA, *FAILURE_SCHEMA])
    configuration = CONFIGURATION.read_text(encoding="utf-8")
    assert "| `IDFLOW_CONCURRENCY` | 4 | ≥ 1, ≤ 256 |" in configuration
    assert "| `IDFLOW_VLLM_PER_ENDPOINT_CONCURRENCY` | 32 | ≥ 1, ≤ 1,024 |" in configuration


def test_check_fails_on_a_stale_doc(tmp_path: Path) -> None:
    """A table edited by hand (or code changed without regenerating) is caught, in either file."""
    for name, old, new in [("reference.md", "| no |", "| yes |"), ("configuration.md", "| 4 |", "| 5 |")]:
        copy = tmp_path / name / "repo"
        shutil.copytree(ROOT / "docs", copy / "docs")
        (copy / "tools").mkdir()
        shutil.copy(SCRIPT, copy / "tools" / "gen_reference.py")
        doc = copy / "docs" / name
        doc.write_text(doc.read_text(encoding="utf-8").replace(old, new, 1), encoding="utf-8")
        result = _check(copy / "tools" / "gen_reference.py", tmp_path)
        assert result.returncode == 1 and f"docs/{name} is out of date" in result.stderr
