"""Where the checkout is, for tests that read its files or start its commands (the same from every tier folder)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
