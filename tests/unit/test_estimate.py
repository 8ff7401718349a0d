"""`idflow run --dry-run`: predicted visual tokens and cost from page headers, nothing sent."""

from __future__ import annotations

from pathlib import Path

from PIL import Image
from typer.testing import CliRunner

from idflow.cli import app
from pipeline.ops.estimate import estimate_folder
from pipeline.settings import Settings


def test_estimate_counts_tokens_from_headers(tmp_path: Path) -> None:
    Image.new("RGB", (1011, 638), "white").save(tmp_path / "card.png")  # ID-1 at 300 dpi -> 1024x640 = 640
    Image.new("RGB", (1700, 2400), "white").save(tmp_path / "page.jpg")  # capped by max_pixels
    (tmp_path / ".hidden.png").write_bytes((tmp_path / "card.png").read_bytes())
    (tmp_path / "notes.txt").write_text("not an image")
    est = estimate_folder(tmp_path, Settings())
    assert (est.pages, est.skipped, est.unreadable) == (2, 1, 1)
    page_tokens = est.visual_tokens - 640
    assert 900 < page_tokens <= 1024


def test_dry_run_prints_estimate_and_sends_nothing(tmp_path: Path, monkeypatch) -> None:
    Image.new("RGB", (1011, 638), "white").save(tmp_path / "card.png")
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-not-used-because-nothing-is-sent")
    monkeypatch.setenv("TAOTOKEN_BASE_URL", "http://127.0.0.1:9")  # discard port: a request would fail loudly
    monkeypatch.setenv("TAOTOKEN_MODEL", "m")
    monkeypatch.setenv("IDFLOW_OPENAI_PRICE_PROMPT_PER_MTOK", "1000000")
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--backend", "openai", "--dry-run",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "visual tokens 640" in result.output
    assert not (tmp_path / "out").exists()
