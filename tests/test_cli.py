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


def test_dask_without_the_extra_names_the_extra(tmp_path: Path, monkeypatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "prefect_dask", None)  # what Python does for a package that is not there
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--dask", "local:1", "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "pip install 'idflow[dask]'" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_vllm_commands_name_a_bad_setting_without_its_value(tmp_path: Path, monkeypatch) -> None:
    from pipeline.cli_vllm import vllm_app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IDFLOW_VLLM_PORT_BASE", "sk-pasted-here-4f9a2c")  # a key pasted into the wrong variable
    result = CliRunner().invoke(vllm_app, ["status"])
    assert result.exit_code == 2 and "port_base" in result.output
    assert "sk-pasted" not in result.output and "4f9a2c" not in result.output
