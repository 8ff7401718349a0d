"""End to end on the embedded backend, through the Prefect flow against a real (test) Prefect server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import pandas as pd

from pipeline.store.crash_journal import JOURNAL_DIR
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from tests.support.paths import REPO


def _truth(sample_dir: Path) -> list[dict]:
    return json.loads((sample_dir.parent / "sample_ground_truth.json").read_text(encoding="utf-8"))


def _normal(value):
    return None if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def test_extract_folder_on_samples_matches_ground_truth(prefect_api, sample_dir: Path, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    from flows.extract import extract_folder

    out = tmp_path / "out"
    summary = asyncio.run(extract_folder(str(sample_dir), str(out)))
    truth = _truth(sample_dir)
    good = [t for t in truth if "expect_failure" not in t and "expect_skip" not in t]
    bad = {t["path"]: t["expect_failure"] for t in truth if "expect_failure" in t}
    skipped = [t for t in truth if t.get("expect_skip")]

    assert summary["accounted"] and summary["seen"] == len(truth)
    assert {t["issuer"] for t in good} >= {"CHN", "UTO", "NLD", "FRA", "GBR"}  # the sample covers each source
    assert any(t["expiry_date"] == "2024-09-30" for t in good)  # and an expired document
    assert (summary["results"], summary["failures"], summary["skipped"]) == (len(good), len(bad), len(skipped))

    results = pd.read_parquet(out / RESULTS)
    by_path = {(r.source_path, r.page): r for r in results.itertuples()}
    for t in good:
        row = by_path[(t["path"], t.get("page", 0))]
        expiry = "long-term" if row.expiry_long_term else _normal(row.expiry_date)
        assert (row.doc_type, _normal(row.name), _normal(row.id_number), expiry) == (
            t["doc_type"], t["name"], t["id_number"], t["expiry_date"]), t["path"]
        # the decisions: issuer as the page states it; expired on the run's date, unknown without an end date
        run_date = date.fromisoformat(row.run_date)
        was_expired = None if t["expiry_date"] in (None, "long-term") else date.fromisoformat(t["expiry_date"]) < run_date
        assert (row.issuer, None if pd.isna(row.expired) else bool(row.expired)) == (t["issuer"], was_expired), t["path"]
        assert row.sent_width % 32 == 0 and row.sent_height % 32 == 0
        assert row.sent_width * row.sent_height <= 1_048_576 and max(row.sent_width, row.sent_height) <= 1600
        assert row.visual_tokens == (row.sent_width // 32) * (row.sent_height // 32)
    failures = {r["source_path"]: r["reason"] for r in read_table(out, FAILURES).to_pylist()}
    assert failures == bad

    async def artifacts() -> set[str]:
        async with get_client() as client:
            found = await client.read_artifacts()
            return {a.key for a in found if a.key}

    keys = asyncio.run(artifacts())
    assert {"idflow-run-summary", "idflow-failures", "idflow-results"} <= keys
    # Masked tables: no full ID number reaches the Prefect API.
    for t in good:
        if t["id_number"] and len(t["id_number"]) == 18:
            assert t["id_number"] not in json.dumps(asyncio.run(_all_artifact_data()))

    # Idempotent: a second run skips everything already done with the same settings.
    again = asyncio.run(extract_folder(str(sample_dir), str(out)))
    assert again["results"] == 0 and again["accounted"]
    assert again["skipped_by_reason"].get("already_done") == len(good)
    assert again["failures"] == len(bad)  # failed documents are tried again, not skipped


async def _all_artifact_data() -> list:
    from prefect.client.orchestration import get_client

    async with get_client() as client:
        return [a.data for a in await client.read_artifacts()]


def test_killed_run_resumes_without_loss_or_duplicates(prefect_api, sample_dir: Path, tmp_path: Path) -> None:
    """Kill `idflow run` after its first Parquet part, start it again: every document exactly once. Every other
    good page of the sample (six, PRC and zone documents): a part or two stored before the kill, the rest by the
    second run."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = [t for t in _truth(sample_dir) if "expect_failure" not in t and "expect_skip" not in t][::2]
    for t in good:
        shutil.copy(sample_dir / t["path"], inbox / Path(t["path"]).name)
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "IDFLOW_FLUSH_EVERY": "1", "IDFLOW_BATCH_SIZE": "1",
           "IDFLOW_CONCURRENCY": "1"}
    cmd = [sys.executable, "-m", "idflow", "run", str(inbox), "--out", str(out)]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list((out / RESULTS).rglob("*.parquet")):
        assert proc.poll() is None, "run ended before it could be killed"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = pd.read_parquet(out / RESULTS)
    assert 0 < len(first) < len(good)

    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    results = pd.read_parquet(out / RESULTS)
    keys = list(zip(results.sha256, results.page))
    assert len(keys) == len(set(keys)) == len(good)
    assert not (out / FAILURES).exists() or read_table(out, FAILURES).num_rows == 0
    # Pages the killed run was preparing, if any, were met and ended by the second: no journal is left.
    assert not any((out / JOURNAL_DIR).iterdir())


def test_a_page_a_dead_run_was_preparing_is_prepared_alone_and_stored(prefect_api, sample_dir: Path,
                                                                       tmp_path: Path) -> None:
    """A run killed while preparing a page (SIGKILL: no Python after it) leaves that page in its journal; the next
    `idflow run` says so, prepares it in a child process, stores its record and leaves no journal behind."""
    good = next(t for t in _truth(sample_dir) if "expect_failure" not in t and "expect_skip" not in t)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    page = inbox / Path(good["path"]).name
    shutil.copy(sample_dir / good["path"], page)
    key = f"{hashlib.sha256(page.read_bytes()).hexdigest()}:0"
    code = ("import os, signal\nfrom pathlib import Path\nfrom pipeline.store.crash_journal import CrashJournal\n"
            f"CrashJournal.open(Path({str(out)!r}), 'dead').begin({key!r})\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO, timeout=120).returncode == -signal.SIGKILL

    env = {**os.environ, "PREFECT_API_URL": prefect_api}
    done = subprocess.run([sys.executable, "-m", "idflow", "run", str(inbox), "--out", str(out)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "1 page(s) a run that died was preparing" in done.stdout + done.stderr
    results = pd.read_parquet(out / RESULTS)
    assert list(zip(results.sha256, results.page)) == [(key[:-2], 0)] and results.name[0] == good["name"]
    assert not any((out / JOURNAL_DIR).iterdir())
