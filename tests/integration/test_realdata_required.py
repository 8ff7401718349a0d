"""`realdata_dir` skips without the specimens, but fails under IDFLOW_REQUIRE_REALDATA=1 (what .ci/run sets), so
CI cannot go green with the real-data tests silently skipped; `browser_binaries` likewise without Chromium under
IDFLOW_REQUIRE_BROWSER=1. Run as a separate pytest on a copy of conftest.py placed where ../shared/realdata does not
exist, with a PATH that holds no browser."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO


@pytest.mark.parametrize(("fixture", "variable"), [("realdata_dir", "IDFLOW_REQUIRE_REALDATA"),
                                                   ("browser_binaries", "IDFLOW_REQUIRE_BROWSER")])
@pytest.mark.parametrize(("required", "code", "verdict"), [("1", 1, "1 error"), ("", 0, "1 skipped")])
def test_missing_dependency_fails_only_when_required(tmp_path: Path, fixture: str, variable: str, required: str,
                                                     code: int, verdict: str) -> None:
    tests = tmp_path / "repo" / "tests"
    tests.mkdir(parents=True)
    (tests / "conftest.py").write_text((REPO / "tests" / "conftest.py").read_text())
    (tests / "test_uses_it.py").write_text(f"def test_it({fixture}):\n    assert {fixture}\n")
    no_browser = tmp_path / "bin"
    no_browser.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("IDFLOW_REALDATA", variable)}
    env.update({variable: required, "PATH": str(no_browser), "PYTHONPATH": str(REPO)})
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)],
                            cwd=tmp_path / "repo", env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == code, result.stdout + result.stderr
    assert verdict in result.stdout
    if required:
        assert f"{variable}=1 requires it" in result.stdout
