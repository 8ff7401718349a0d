"""The drift canary's settings and report: off by default, where the manifest is, when it is degraded, and that
what it reports is aggregate only. Reading documents with a backend: tests/integration/test_canary_nightly.py."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from pipeline.ops.canary import CanaryReport, canary_fields, read_canary
from pipeline.settings import CanarySettings, Settings


def test_off_by_default_and_the_manifest_is_found_in_the_folder_or_named(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    monkeypatch.delenv("IDFLOW_CANARY_DIR", raising=False)
    assert CanarySettings().manifest() is None
    assert asyncio.run(read_canary(Settings(), CanarySettings())) is None
    monkeypatch.setenv("IDFLOW_CANARY_DIR", str(tmp_path))
    assert CanarySettings().manifest() == tmp_path / "manifest.json"
    assert CanarySettings(dir=tmp_path / "truth.json").manifest() == tmp_path / "truth.json"
    assert CanarySettings().min_accuracy == 0.95
    with pytest.raises(ValidationError):
        CanarySettings(min_accuracy=1.5)


def test_a_canary_that_cannot_be_read_is_degraded_and_says_why_masked(tmp_path: Path) -> None:
    folder = tmp_path / "canary-E12345678"
    folder.mkdir()
    report = asyncio.run(read_canary(Settings(), CanarySettings(dir=folder, min_accuracy=0.5)))
    assert report is not None and report.degraded and report.accuracy is None
    assert report.error and "FileNotFoundError" in report.error and "E12345678" not in report.error
    (folder / "manifest.json").write_text("[]", encoding="utf-8")
    empty = asyncio.run(read_canary(Settings(), CanarySettings(dir=folder)))
    assert empty is not None and empty.degraded and "no scored document" in (empty.error or "")


def test_degraded_below_the_level_and_the_report_holds_aggregates_only() -> None:
    base = {"backend": "ocr", "model": "rapidocr", "fingerprint": "f" * 16, "min_accuracy": 0.9, "documents": 4,
            "fields_total": 12, "per_field": {"name": 0.75, "id_number": 1.0, "expiry_date": 1.0}}
    healthy = CanaryReport(**base, fields_correct=11)  # 0.917
    low = CanaryReport(**base, fields_correct=10, documents_failed=1)  # 0.833
    assert not healthy.degraded and low.degraded
    assert "healthy" in healthy.markdown() and "DEGRADED" in low.markdown()
    shown = low.as_dict()
    assert set(shown) == set(canary_fields()) and shown["accuracy"] == 0.8333 and shown["degraded"] is True
    json.dumps(shown)  # goes into summaries, artifacts and event payloads as it is
