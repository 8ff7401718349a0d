"""CLI contract: configuration errors exit 2 before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from idflow.cli import app


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


@pytest.mark.parametrize("key", ["sk-broken-3e1d9a\nX-Extra: 1", "sk-broken-3e1d9a\u200b", "sk-broken 3e1d9a"])
def test_a_key_that_cannot_be_sent_is_a_configuration_error_naming_no_value(tmp_path: Path, monkeypatch,
                                                                            key: str) -> None:
    # Sent as it is, the HTTP library would refuse the header and quote it, key included, as a retryable outage.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TAOTOKEN_API_KEY", key)
    monkeypatch.setenv("TAOTOKEN_MODEL", "test-vlm")
    for command in (["run", str(tmp_path), "--backend", "openai", "--out", str(tmp_path / "out")],
                    ["doctor", "--backend", "openai"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and "TAOTOKEN_API_KEY" in result.output, result.output
        assert "whitespace, control or non-ASCII" in " ".join(result.output.split())
        assert "3e1d9a" not in result.output
    assert not (tmp_path / "out").exists()


def test_the_input_folder_as_output_is_a_configuration_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tmp_path), "--out", str(tmp_path / "." / "")])
    assert result.exit_code == 2 and "--out is the input folder itself" in " ".join(result.output.split())
    assert not (tmp_path / "results").exists()


def test_an_input_folder_whose_name_is_not_utf8_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    folder = Path(os.fsdecode(bytes(tmp_path) + b"/in-\xff"))
    folder.mkdir()
    result = CliRunner().invoke(app, ["run", str(folder), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "not UTF-8" in " ".join(result.output.split()), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_eval_names_files_the_manifest_lists_but_are_not_there(tmp_path: Path) -> None:
    (tmp_path / "scans").mkdir()
    (tmp_path / "scans" / "a.jpg").write_bytes(b"x")
    manifest = tmp_path / "truth.json"
    manifest.write_text('[{"path": "a.jpg", "name": null, "id_number": null, "expiry_date": null}]')
    result = CliRunner().invoke(app, ["eval", str(manifest)])
    assert result.exit_code == 2 and "1 of the manifest's 1 files" in " ".join(result.output.split())
    assert "--root" in result.output


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
    from idflow.vllm import vllm_app

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IDFLOW_VLLM_PORT_BASE", "sk-pasted-here-4f9a2c")  # a key pasted into the wrong variable
    result = CliRunner().invoke(vllm_app, ["status"])
    assert result.exit_code == 2 and "port_base" in result.output
    assert "sk-pasted" not in result.output and "4f9a2c" not in result.output


@pytest.mark.parametrize("variable", ["TAOTOKEN_BASE_URL", "IDFLOW_OPENAI_BASE_URL"])
def test_a_base_url_that_is_no_url_stops_only_the_backends_that_call_it(tmp_path: Path, monkeypatch,
                                                                        variable: str) -> None:
    """Part of each backend's configuration check: the runs that would send to it (openai, a hybrid escalating to
    it, a vLLM pool falling back to it) are refused in one line naming the setting; the OCR is not touched."""
    from pipeline.extract.registry import backend_spec
    from pipeline.settings import Settings

    monkeypatch.chdir(tmp_path)
    for var in ("TAOTOKEN_BASE_URL", "IDFLOW_OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(variable, "ftp//host/api")
    monkeypatch.setenv("TAOTOKEN_API_KEY", "sk-url-check-0000000000")
    monkeypatch.setenv("TAOTOKEN_MODEL", "test-vlm")
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", "http://127.0.0.1:8004/v1")
    monkeypatch.setenv("IDFLOW_VLLM_MODEL", "qwen")
    monkeypatch.setenv("IDFLOW_VLLM_API_KEY", "sk-vllm-0000000000")
    problems = {name: backend_spec(name).check(Settings(backend=name)) for name in ("ocr", "openai", "hybrid", "vllm")}
    assert problems["ocr"] is None and problems["vllm"] is None  # the pool itself never calls that URL
    for name in ("openai", "hybrid"):
        assert "TAOTOKEN_BASE_URL" in str(problems[name]) and "http(s) URL with a host" in str(problems[name])
        assert "ftp//host" not in str(problems[name])
    monkeypatch.setenv("IDFLOW_VLLM_FALLBACK", "openai")
    assert "TAOTOKEN_BASE_URL" in str(backend_spec("vllm").check(Settings(backend="vllm")))

    for command in (["run", str(tmp_path), "--backend", "openai", "--out", str(tmp_path / "out")],
                    ["doctor", "--backend", "openai"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2 and "TAOTOKEN_BASE_URL" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and "ftp//host" not in result.output
    assert not (tmp_path / "out").exists()


def test_fallback_reaches_the_run_settings_without_the_environment(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """`idflow run --fallback openai` is the pool's IDFLOW_VLLM_FALLBACK for that run: checked like the setting
    (the openai endpoint's URL it would fall back to), the pool's other settings as the environment gives them,
    and nothing written into the environment."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IDFLOW_VLLM_FALLBACK", raising=False)
    monkeypatch.setenv("IDFLOW_VLLM_ENDPOINTS", "http://127.0.0.1:8004/v1")
    monkeypatch.setenv("IDFLOW_VLLM_MODEL", "qwen")
    monkeypatch.setenv("IDFLOW_VLLM_API_KEY", "sk-vllm-0000000000")
    monkeypatch.setenv("TAOTOKEN_BASE_URL", "ftp//host/api")
    run = ["run", str(tmp_path), "--backend", "vllm", "--out", str(tmp_path / "out"), "--dry-run"]
    refused = CliRunner().invoke(app, [*run, "--fallback", "openai"])
    assert refused.exit_code == 2 and "TAOTOKEN_BASE_URL" in refused.output, refused.output
    assert "IDFLOW_VLLM_FALLBACK" not in os.environ
    wrong = CliRunner().invoke(app, [*run, "--fallback", "somewhere"])
    assert wrong.exit_code == 2 and "fallback" in wrong.output, wrong.output

    from idflow.common import load_settings

    settings = load_settings(backend="vllm", vllm_fallback="none")
    assert settings.vllm.fallback == "none" and settings.vllm.model == "qwen"  # the rest as the environment says
