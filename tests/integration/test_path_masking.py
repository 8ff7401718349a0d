"""An ID number in the input folder's name stays masked everywhere but inside OUT's personal-data files: a real
`idflow run` on `scans_<PRC number>/`, then a search of the console, OUT's other files, every file of the Prefect
home (the SQLite database: flow run parameters and names, logs, events, artifacts), and the error log."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from pipeline.review.failure_queue import input_dirs
from pipeline.store.parquet import run_input_dir
from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.idflow_process import idflow, no_server_left, run_env, unique_scans

KEY = "sk-paths-8e2b6c4a1f9d7035"
PRC = "320106197701013454"  # a valid PRC resident ID number (check digit 4)
PERSONAL = ("results", "failures", "review", "sources")  # OUT's files documented as holding personal data


def test_a_number_in_the_input_folders_name_is_stored_masked(tmp_path: Path) -> None:
    scans = unique_scans(tmp_path / f"scans_{PRC}", 3)
    out = tmp_path / "out"
    with ChatServer(ServerConfig(api_key=KEY)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url)
        proc = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "run.log")
        code = proc.wait(timeout=900)
    console = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 0, console[-3000:]
    no_server_left(tmp_path / "prefect-home")
    assert PRC not in console and "3201**********3454" in console  # the run name, masked

    others = [p for p in out.rglob("*") if p.is_file() and p.relative_to(out).parts[0] not in PERSONAL]
    assert any(p.parent.name == "runs" for p in others)
    for path in others:
        assert PRC.encode() not in path.read_bytes(), path
    home = tmp_path / "prefect-home"
    for path in (p for p in home.rglob("*") if p.is_file()):
        assert PRC.encode() not in path.read_bytes(), path

    with sqlite3.connect(home / "prefect.db") as db:
        runs = list(db.execute("SELECT name, parameters FROM flow_run"))
        artifacts = [d for (d,) in db.execute("SELECT data FROM artifact WHERE data IS NOT NULL")]
    assert len(runs) == 1 and "3201**********3454" in runs[0][0]
    assert PRC not in runs[0][1] and artifacts and not any(PRC in str(a) for a in artifacts)

    # The exact folder lives in OUT's sources file, where the retry and the review find files.
    summary = json.loads(next((out / "runs").glob("*.json")).read_text())
    assert summary["input_dir"] == str(scans.resolve()).replace(PRC, "3201**********3454")
    assert run_input_dir(summary, out) == scans.resolve()
    assert list(input_dirs(out).values()) == [scans.resolve()]
    assert not list((out / "sources").glob("pending-*"))  # the flow's folder reference is gone with the run


def test_an_older_summary_with_its_folder_in_full_is_still_read(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    summary = {"run_id": "old", "input_dir": str(folder), "input_dir_hex": bytes(str(folder), "utf-8").hex()}
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "old.json").write_text(json.dumps(summary))
    assert run_input_dir(summary, tmp_path) == folder and input_dirs(tmp_path) == {"old": folder}
