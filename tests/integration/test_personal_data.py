"""Document numbers stay out of everything but OUT's personal-data files: a real `idflow run` on `scans_<PRC
number>/`, whose model answers carry distinctive numbers that fail validation (so they travel through failure
details, schema messages and the failure tables), then a search of the console output, the run's other output
files and every file of the Prefect server's home (its SQLite database: logs, artifacts, flow and task runs).

The folder's number is masked everywhere but OUT's results, failures, review pages (for the person correcting) and
sources (the exact folder, where the retry and the review find files). One run proves both, the number in the folder's
name and the numbers in the answers and a file's name: each is searched for in every file that run wrote."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.review.failure_queue import input_dirs
from pipeline.store.parquet import run_input_dir
from tests.support.chat_server import VALID_ANSWER, ChatServer, ServerConfig
from tests.support.idflow_process import idflow, no_server_left, run_env, unique_scans

KEY = "sk-personal-3c9e1a7f5b2d8e64"
NUMBER = "73519246_q"  # an answer's document number with a character no transcription tidying removes: the schema
# rejects and quotes it
FILE_NUMBER = "E86420975"  # a document number in a file name
SECRETS = ("73519246", "86420975", KEY)
PRC = "320106197701013454"  # a valid PRC resident ID number (check digit 4), in the input folder's name
MASKED = "3201**********3454"
PERSONAL = ("results", "failures", "review", "sources")  # OUT's files documented as holding personal data


def test_numbers_in_answers_file_and_folder_names_reach_no_console_log_summary_or_prefect_database(
        tmp_path: Path) -> None:
    scans = unique_scans(tmp_path / f"scans_{PRC}", 3)
    (scans / "scan_0000.png").rename(scans / f"{FILE_NUMBER}.png")
    answer = {**VALID_ANSWER, "id_number": NUMBER}
    out = tmp_path / "out"
    with ChatServer(ServerConfig(api_key=KEY, default_answer=answer)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url)
        proc = idflow("run", str(scans), "--out", str(out), env=env, cwd=tmp_path, log=tmp_path / "run.log")
        code = proc.wait(timeout=900)
    console = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 0, console[-3000:]
    no_server_left(tmp_path / "prefect-home")

    # The numbers did go through the failing path: the failure queue holds them (Parquet is allowed to).
    failures = pq.read_table(next((out / "failures").rglob("*.parquet"))).to_pylist()
    assert {f["reason"] for f in failures} == {"schema_violation"} and len(failures) == 3
    assert all(NUMBER in (f["raw_response"] or "") for f in failures)
    assert "schema_violation" in console  # the failure table was printed

    for secret in (*SECRETS, PRC):
        assert secret not in console, secret
    assert MASKED in console  # the run's name, masked
    assert list((out / "review").glob("*.html")), "the review page is written"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.parent.name == "runs" for p in files), "the run summary is written"
    for path in files:
        data, part = path.read_bytes(), path.relative_to(out).parts[0]
        if part not in PERSONAL:  # the folder's number: only in OUT's personal-data files
            assert PRC.encode() not in data, path
        # the documents' numbers: in Parquet and on the review page only (the sources file holds the folder, not
        # what was read)
        if path.suffix != ".parquet" and part != "review":
            assert not any(s.encode() in data for s in SECRETS), path
    home = tmp_path / "prefect-home"
    for path in (p for p in home.rglob("*") if p.is_file()):
        assert not any(s.encode() in path.read_bytes() for s in (*SECRETS, PRC)), path

    # ...and the database does hold this run, its logs and the failure artifact, masked.
    with sqlite3.connect(home / "prefect.db") as db:
        runs = list(db.execute("SELECT name, parameters FROM flow_run"))
        logs = [m for (m,) in db.execute("SELECT message FROM log")]
        artifacts = {k: d for k, d in db.execute("SELECT key, data FROM artifact WHERE key IS NOT NULL")}
    assert len(runs) == 1 and MASKED in runs[0][0] and PRC not in runs[0][1]
    assert any("Finished in state" in m for m in logs)
    assert "idflow-failures" in artifacts and "E8*****75.png" in artifacts["idflow-failures"]

    # The exact folder lives in OUT's sources file, where the retry and the review find files.
    summary = json.loads(next((out / "runs").glob("*.json")).read_text())
    assert summary["input_dir"] == str(scans.resolve()).replace(PRC, MASKED)
    assert run_input_dir(summary, out) == scans.resolve()
    assert list(input_dirs(out).values()) == [scans.resolve()]
    assert not list((out / "sources").glob("pending-*"))  # the flow's folder reference is gone with the run
