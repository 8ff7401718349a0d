"""A run you can watch: `idflow run data/sample` against a real `prefect server start` shows its batches as task runs
with their counts (read through the API and seen in headless Chromium), and no artifact of the run holds a full
name or document number (the Parquet results, which may, are the reference)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from pipeline.store.parquet import RESULTS, RUNS
from tests.support.browser import Browser, BrowserBinaries
from tests.support.paths import REPO
from tests.support.prefect_server import Stack, prefect_server, wait_for

BATCH = 4

pytestmark = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str, Path]]:
    tmp = tmp_path_factory.mktemp("ui")
    with prefect_server(tmp) as stack:
        out = tmp / "out"
        done = subprocess.run([sys.executable, "-m", "idflow", "run", str(REPO / "data" / "sample"), "--out", str(out)],
                              env={**stack.env, "IDFLOW_BATCH_SIZE": str(BATCH)}, cwd=tmp, capture_output=True,
                              text=True, timeout=1200)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        (summary,) = [json.loads(p.read_text()) for p in (out / RUNS).glob("*.json")]
        yield stack, summary["run_id"], out


def _task_runs(stack: Stack, flow_run_id: str) -> list:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    return stack.call(lambda c: c.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))))


def _logs(stack: Stack, flow_run_id: str) -> list:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return stack.call(lambda c: c.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))))


def test_each_batch_is_a_completed_task_run_whose_log_gives_its_counts(watched: tuple[Stack, str, Path]) -> None:
    stack, flow_run_id, out = watched
    summary = json.loads((out / RUNS / f"{flow_run_id}.json").read_text())
    batches = sorted((t for t in _task_runs(stack, flow_run_id) if t.name.startswith("batch-")), key=lambda t: t.name)
    assert [t.name for t in batches] == [f"batch-{i:05d}" for i in range(1, math.ceil(summary["seen"] / BATCH) + 1)]
    assert all(t.state is not None and t.state.is_completed() for t in batches)
    counts = [m.message for m in _logs(stack, flow_run_id) if m.message.startswith("batch ")]
    assert len(counts) == len(batches)
    documents = sum(int(line.split(": ", 1)[1].split(" documents")[0]) for line in counts)
    assert documents == summary["seen"] == summary["results"] + summary["failures"] + summary["skipped"]


def test_no_artifact_holds_a_name_or_a_number(watched: tuple[Stack, str, Path]) -> None:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    stack, flow_run_id, out = watched
    rows = ds.dataset(out / RESULTS, format="parquet", partitioning="hive").to_table(
        columns=["name", "id_number"]).to_pylist()
    personal = {v for r in rows for v in (r["name"], r["id_number"]) if v and len(v) >= 2}
    assert len(personal) >= 10  # the sample's records do carry names and numbers
    artifacts = stack.call(lambda c: c.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))))
    assert {"idflow-run-summary", "idflow-results", "idflow-batches"} <= {a.key for a in artifacts}
    for artifact in artifacts:
        text = json.dumps(artifact.data, ensure_ascii=False) + (artifact.description or "")
        leaked = sorted(v for v in personal if v in text)
        assert leaked == [], f"{artifact.key} holds {len(leaked)} personal values"
    run = stack.call(lambda c: c.read_flow_run(flow_run_id))
    assert not any(v in run.name or v in json.dumps(run.parameters, ensure_ascii=False) for v in personal)


def test_the_ui_shows_the_batches_and_their_counts(browser_binaries: BrowserBinaries,
                                                   watched: tuple[Stack, str, Path],
                                                   tmp_path: Path) -> None:
    stack, flow_run_id, _ = watched
    with Browser(tmp_path, browser_binaries) as browser:
        browser.open(f"{stack.url}/runs/flow-run/{flow_run_id}")
        browser.click(browser.wait_for_element("css selector", "li#task-runs"))
        wait_for(lambda: "batch-00001" in browser.text(), 60, "the batch task runs on the Task Runs tab")
        browser.screenshot(tmp_path / "flow-run-task-runs.png")
        browser.click(browser.wait_for_element("css selector", "li#logs"))
        text = wait_for(lambda: (t := browser.text()) and "batch 1: " in t and t, 60, "the batch counts in the logs")
        browser.screenshot(tmp_path / "flow-run-logs.png")
    assert f"batch 1: {BATCH} documents" in text
