"""CLI contract: configuration errors exit 2 before any work starts."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
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


NUMBER_NAME = "zhang110101199003071233.jpg"


def _idflow(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    repo = Path(__file__).resolve().parent.parent
    return subprocess.run([sys.executable, "-m", "idflow", *args], cwd=repo, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(repo), **env})


@pytest.mark.parametrize("kind", ["missing", "folder", "device"])
def test_doctor_sample_that_is_no_file_is_one_masked_line(tmp_path: Path, kind: str) -> None:
    """A missing sample printed a traceback with the full number in its name; /dev/zero was hashed forever."""
    sample = {"missing": tmp_path / NUMBER_NAME, "folder": tmp_path / NUMBER_NAME, "device": Path("/dev/zero")}[kind]
    if kind == "folder":
        sample.mkdir()
    # the doctor wants a key set before it looks at the sample: a throwaway made now, not a literal in the code
    done = _idflow("doctor", "--backend", "openai", "--sample", str(sample), TAOTOKEN_API_KEY=secrets.token_hex(8),
                   TAOTOKEN_MODEL="m")
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
