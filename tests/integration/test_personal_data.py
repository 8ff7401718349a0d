"""Document numbers stay out of everything but Parquet: a real `idflow run` whose model answers carry distinctive
numbers that fail validation (so they travel through failure details, schema messages and the failure tables),
then a search of the console output, the run's other output files (not the review page, which is for the
person correcting) and every file of the Prefect server's home
(its SQLite database: logs, artifacts, flow and task runs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pyarrow.parquet as pq

from tests.support.chat_server import VALID_ANSWER, ChatServer, ServerConfig
from tests.support.idflow_process import idflow, no_server_left, run_env, unique_scans

KEY = "sk-personal-3c9e1a7f5b2d8e64"
NUMBER = "73519246_q"  # an answer's document number with a character no transcription tidying removes: the schema
# rejects and quotes it
FILE_NUMBER = "E86420975"  # a document number in a file name
SECRETS = ("73519246", "86420975", KEY)


def test_document_numbers_reach_no_console_log_summary_or_prefect_database(tmp_path: Path) -> None:
    scans = unique_scans(tmp_path / "in", 3)
    (scans / "scan_0000.png").rename(scans / f"{FILE_NUMBER}.png")
    answer = {**VALID_ANSWER, "id_number": NUMBER}
    with ChatServer(ServerConfig(api_key=KEY, default_answer=answer)) as chat:
        env = run_env(tmp_path, IDFLOW_BACKEND="openai", TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      TAOTOKEN_BASE_URL=chat.base_url)
        proc = idflow("run", str(scans), "--out", str(tmp_path / "out"), env=env, cwd=tmp_path,
                      log=tmp_path / "run.log")
        code = proc.wait(timeout=900)
    console = (tmp_path / "run.log").read_text(errors="replace")
    assert code == 0, console[-3000:]
    no_server_left(tmp_path / "prefect-home")

    # The numbers did go through the failing path: the failure queue holds them (Parquet is allowed to).
    failures = pq.read_table(next((tmp_path / "out" / "failures").rglob("*.parquet"))).to_pylist()
    assert {f["reason"] for f in failures} == {"schema_violation"} and len(failures) == 3
    assert all(NUMBER in (f["raw_response"] or "") for f in failures)
    assert "schema_violation" in console  # the failure table was printed

    for secret in SECRETS:
        assert secret not in console, secret
    # Parquet and the review pages (OUT/review/, for the person correcting; issue 13) hold personal data.
    out = tmp_path / "out"
    assert list((out / "review").glob("*.html")), "the review page is written"
    others = [p for p in out.rglob("*") if p.is_file() and p.suffix != ".parquet"
              and p.relative_to(out).parts[0] != "review"]
    assert others, "the run summary is written"
    for path in others:
        assert not any(s.encode() in path.read_bytes() for s in SECRETS), path
    home = tmp_path / "prefect-home"
    for path in (p for p in home.rglob("*") if p.is_file()):
        assert not any(s.encode() in path.read_bytes() for s in SECRETS), path

    # ...and the database does hold this run's logs and the failure artifact, masked.
    with sqlite3.connect(home / "prefect.db") as db:
        logs = [m for (m,) in db.execute("SELECT message FROM log")]
        artifacts = {k: d for k, d in db.execute("SELECT key, data FROM artifact WHERE key IS NOT NULL")}
    assert any("Finished in state" in m for m in logs)
    assert "idflow-failures" in artifacts and "E8*****75.png" in artifacts["idflow-failures"]
