"""CLI contract: configuration errors exit 2 before any work starts."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pipeline.cli import app


def test_missing_input_folder_is_a_configuration_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())
    assert not (tmp_path / "out").exists()


def test_openai_without_key_or_model_exits_2_before_work(tmp_path: Path, monkeypatch) -> None:
    for var in ("TAOTOKEN_API_KEY", "IDFLOW_OPENAI_API_KEY", "IDFLOW_OPENAI_KEY_BLOCK", "TAOTOKEN_MODEL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--backend", "openai", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "TAOTOKEN_API_KEY" in result.output
    monkeypatch.setenv("TAOTOKEN_API_KEY", "  sk-padded-key-0000000000  ")
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--backend", "openai", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "TAOTOKEN_MODEL" in result.output
    assert "sk-padded" not in result.output
    assert not (tmp_path / "out").exists()


def test_unknown_backend_is_a_configuration_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--backend", "gpt", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
