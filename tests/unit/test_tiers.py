"""Every test file sits in one tier folder (tests/README.md), so `pytest tests/unit` (or `-m unit`) is the fast loop
and nothing slow or dependent on the real specimens slips into it unseen."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.support.paths import TESTS

TIERS = ("unit", "integration", "realdata")
# Fixtures that start a server or a browser: a test asking for one is an integration test.
INTEGRATION_FIXTURES = {"prefect_api", "browser_binaries", "serve"}


def _test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("*.py") if p.name.startswith("test_") or p.name.endswith("_test.py"))


def _requested_fixtures(path: Path) -> set[str]:
    """The parameter names of every test function and fixture in the file (what pytest injects)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names |= {a.arg for a in node.args.args + node.args.kwonlyargs}
    return names


def test_the_tree_is_read() -> None:
    files = _test_files()
    assert {p.relative_to(TESTS).parts[0] for p in files} == set(TIERS)
    assert Path(__file__).resolve() in files


def test_every_test_file_is_in_a_tier_folder() -> None:
    outside = [p.relative_to(TESTS).as_posix() for p in _test_files() if p.relative_to(TESTS).parts[0] not in TIERS]
    assert outside == [], f"move these into tests/unit, tests/integration or tests/realdata (tests/README.md): {outside}"


def test_test_file_names_are_unique_across_tiers() -> None:
    """Test modules are imported by their file name (the tier folders are no packages): two alike would clash."""
    twice = [name for name, n in Counter(p.name for p in _test_files()).items() if n > 1]
    assert twice == []


def test_only_the_realdata_tier_reads_the_real_specimens() -> None:
    misplaced = [p.relative_to(TESTS).as_posix() for p in _test_files()
                 if p.relative_to(TESTS).parts[0] != "realdata" and "realdata_dir" in _requested_fixtures(p)]
    assert misplaced == [], f"tests that take realdata_dir belong in tests/realdata: {misplaced}"


def test_unit_tests_start_no_server_and_no_browser() -> None:
    misplaced = {p.name: sorted(_requested_fixtures(p) & INTEGRATION_FIXTURES)
                 for p in _test_files() if p.relative_to(TESTS).parts[0] == "unit"}
    assert {name: found for name, found in misplaced.items() if found} == {}
