"""A run you can watch: `idflow run data/sample` as a new user runs it (no Prefect API configured, so idflow starts
its local server, which stays up for the link the run printed) shows its batches as task runs with their counts
(read through the API and seen in headless Chromium), ends saying where to look, and no artifact of the run holds a
full name or document number (the Parquet results, which may, are the reference). One run serves every test here:
each proves a view of the same run.

The run reads the sample through a loopback model answering each page from the sample's ground truth
(tests/support/mistake_server.py, no mistakes): what is proven here is the run's Prefect side, its last lines and the
UI, the same for every backend; the embedded reader's runs of the sample are tested in test_flow_extract.py. Runs on
a `prefect server start` of the user's own are in test_ops_e2e.py, test_sharded.py and test_canary_nightly.py."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipeline.store.parquet import RESULTS, RUNS
from tests.support.browser import Browser, BrowserBinaries
from tests.support.idflow_process import idflow, run_env
from tests.support.mistake_server import truth_model
from tests.support.paths import REPO
from tests.support.prefect_server import call_api, wait_for

BATCH = 4
KEY = "sk-flow-ui-5e1d8b"
LINK = re.compile(r"View at (http://127\.0\.0\.1:\d+/runs/flow-run/([0-9a-f-]{36}))")

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def model() -> Iterator[dict[str, str]]:
    """A loopback OpenAI-compatible endpoint answering every sample page from its ground truth; yields the
    environment that points a run's `openai` backend at it."""
    with truth_model(REPO / "data" / "sample_ground_truth.json", KEY) as env:
        yield env


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory, model: dict[str, str]) -> Iterator[tuple[str, str, str, Path]]:
    """The quick start as a new user runs it: no Prefect API configured, so idflow starts its local server, which
    stays up after the run (its idle time) for the link the run printed. Yields (the command's own output, link,
    flow run id, Prefect home)."""
    tmp = tmp_path_factory.mktemp("local-ui")
    env = run_env(tmp, IDFLOW_PREFECT_SERVER_IDLE_S="900", IDFLOW_BATCH_SIZE=str(BATCH), **model)
    try:
        done = subprocess.run([sys.executable, "-m", "idflow", "run", str(REPO / "data" / "sample"), "--out",
                               str(tmp / "out")], env=env, cwd=tmp, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
        found = LINK.search(done.stdout + done.stderr)  # Prefect's log line (stderr)
        assert found, (done.stdout + done.stderr)[-4000:]
        yield done.stdout, found.group(1), found.group(2), tmp / "prefect-home"
    finally:
        subprocess.run([sys.executable, "-m", "idflow", "stop-server", "--force"], env=env, cwd=tmp,
                       capture_output=True, timeout=120)


def _api(link: str) -> str:
    """The API of the server whose UI `link` points into."""
    return f"{link.split('/runs/')[0]}/api"


def _out(local_run: tuple[str, str, str, Path]) -> Path:
    return local_run[3].parent / "out"


def _task_runs(api: str, flow_run_id: str) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    return call_api(api, lambda c: c.read_task_runs(
        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))))


def _logs(api: str, flow_run_id: str) -> list:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return call_api(api, lambda c: c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
        any_=[flow_run_id]))))


def test_each_batch_is_a_completed_task_run_whose_log_gives_its_counts(
        local_run: tuple[str, str, str, Path]) -> None:
    _, link, flow_run_id, _ = local_run
    api = _api(link)
    summary = json.loads((_out(local_run) / RUNS / f"{flow_run_id}.json").read_text())
    batches = sorted((t for t in _task_runs(api, flow_run_id) if t.name.startswith("batch-")), key=lambda t: t.name)
    assert [t.name for t in batches] == [f"batch-{i:05d}" for i in range(1, math.ceil(summary["seen"] / BATCH) + 1)]
    assert all(t.state is not None and t.state.is_completed() for t in batches)
    counts = [m.message for m in _logs(api, flow_run_id) if m.message.startswith("batch ")]
    assert len(counts) == len(batches)
    documents = sum(int(line.split(": ", 1)[1].split(" documents")[0]) for line in counts)
    assert documents == summary["seen"] == summary["results"] + summary["failures"] + summary["skipped"]


def test_no_artifact_holds_a_name_or_a_number(local_run: tuple[str, str, str, Path]) -> None:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    _, link, flow_run_id, _ = local_run
    api = _api(link)
    rows = ds.dataset(_out(local_run) / RESULTS, format="parquet", partitioning="hive").to_table(
        columns=["name", "id_number"]).to_pylist()
    personal = {v for r in rows for v in (r["name"], r["id_number"]) if v and len(v) >= 2}
    assert len(personal) >= 10  # the sample's records do carry names and numbers
    artifacts = call_api(api, lambda c: c.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))))
    assert {"idflow-run-summary", "idflow-results", "idflow-batches"} <= {a.key for a in artifacts}
    for artifact in artifacts:
        text = json.dumps(artifact.data, ensure_ascii=False) + (artifact.description or "")
        leaked = sorted(v for v in personal if v in text)
        assert leaked == [], f"{artifact.key} holds {len(leaked)} personal values"
    run = call_api(api, lambda c: c.read_flow_run(flow_run_id))
    assert not any(v in run.name or v in json.dumps(run.parameters, ensure_ascii=False) for v in personal)


def test_the_run_ends_saying_where_to_look_and_what_needs_a_person(local_run: tuple[str, str, str, Path]) -> None:
    console, link, flow_run_id, _ = local_run
    last = [line for line in console.splitlines() if line.strip()][-3:]
    assert last[0].startswith(f"Prefect UI: {link} (the local Prefect server stays up 15 min after the last run "
                              "ends; `idflow ui` keeps it up"), last
    assert last[1] == f"review page: {_out(local_run) / 'review' / f'{flow_run_id}.html'}", last
    summary = json.loads((_out(local_run) / RUNS / f"{flow_run_id}.json").read_text())
    d = summary["decisions"]
    assert last[2].startswith(f"{d['auto_accepted']} auto-accepted, {d['to_review']} to review, "
                              f"{d['failed']} failed (auto-accepted: every field's confidence at least 0.95"), last
    assert d["auto_accepted"] + d["to_review"] == summary["results"] and d["failed"] == summary["failures"] == 2
    assert d["expired"] == 1 and d["by_issuer"]["CHN"] == 8  # the sample's expired passport; its PRC documents


def test_the_link_a_run_printed_opens_the_flow_run_with_its_batches_and_their_counts(
        browser_binaries: BrowserBinaries, local_run: tuple[str, str, str, Path], tmp_path: Path) -> None:
    _, link, flow_run_id, _ = local_run
    with Browser(tmp_path, browser_binaries) as browser:
        browser.open(link)
        browser.click(browser.wait_for_element("css selector", "li#task-runs"))
        wait_for(lambda: "batch-00001" in browser.text(), 120, "the batch task runs on the Task Runs tab")
        runs_tab = browser.text()
        browser.screenshot(tmp_path / "flow-run-task-runs.png")
        browser.click(browser.wait_for_element("css selector", "li#logs"))
        logs_tab = wait_for(lambda: (t := browser.text()) and "batch 1: " in t and t, 60,
                            "the batch counts in the logs")
        browser.screenshot(tmp_path / "flow-run-logs.png")
    name = call_api(_api(link), lambda c: c.read_flow_run(flow_run_id)).name
    assert name in runs_tab  # the run's own page, not the UI's landing page
    assert f"batch 1: {BATCH} documents" in logs_tab


def test_idflow_ui_keeps_a_server_with_the_ui_up_until_stopped(local_run: tuple[str, str, str, Path],
                                                               tmp_path: Path) -> None:
    """`idflow ui` joins the server the run left (same Prefect home): its UI serves that earlier run's page; a
    SIGTERM ends the command at once (exit 0) and the server keeps its idle time."""
    _, link, flow_run_id, home = local_run
    env = {**run_env(tmp_path), "PREFECT_HOME": str(home), "IDFLOW_PREFECT_SERVER_IDLE_S": "900"}
    log = tmp_path / "ui.log"
    proc = idflow("ui", env=env, cwd=tmp_path, log=log)
    try:
        shown = wait_for(lambda: (m := re.search(r"Prefect UI: (http://127\.0\.0\.1:\d+)", log.read_text()))
                         and m.group(1), 300, "`idflow ui` to print its address")
        assert link.startswith(shown + "/runs/")  # the server the run used: still up, joined, not a new one
        page = urllib.request.urlopen(urllib.request.Request(link, headers={"Accept": "text/html"})).read()
        assert b"<!DOCTYPE html>" in page[:200]
    finally:
        proc.terminate()
    assert proc.wait(timeout=120) == 0, log.read_text()
    assert "Traceback" not in log.read_text()
