"""Operations end to end with real processes on loopback: `prefect server start`, `idflow serve`,
`idflow watch`; an upload folder with a marker starts an `on-upload` run; `nightly` then does only the folder
nobody did yet; the Prefect UI shows the run's summary artifact in headless Chromium; `prefect.yaml` deploys.
The upload folders are named with an ID number, which stays masked in everything Prefect and the processes keep
(one stack proves both: a second server, serve and watch doing the same runs cost the suite a minute).

Slow (server start, OCR runs): generous timeouts; every process is killed in `finally`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from flows.watch import STATE_NAME
from pipeline.ingest.inbox import LEDGER_DIR, LEDGER_NAME
from pipeline.ingest.sources import folder_reference, resolve
from pipeline.store.parquet import RESULTS, RUNS, run_input_dir
from tests.support.browser import Browser, BrowserBinaries
from tests.support.paths import REPO
from tests.support.prefect_server import Stack, prefect_server, wait_for

SAMPLES = ("cn_front.jpg", "passport_td3.jpg", "broken.jpg")  # two good documents and one failure
PRC = "320106197701013454"  # a valid PRC resident ID number (check digit 4), in the upload folders' names
MASKED = "3201**********3454"
FIRST, SECOND = f"scans_{PRC}", f"batch_{PRC}_b"  # the on-upload run's folder, then nightly's
PERSONAL = ("results", "failures", "review", "sources")  # OUT's files documented as holding personal data

pytestmark = pytest.mark.timeout(1500)


@dataclass
class OpsStack(Stack):
    inbox: Path
    out: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpsStack]:
    tmp = tmp_path_factory.mktemp("ops")
    (tmp / "inbox").mkdir()
    with prefect_server(tmp, OpsStack, inbox=tmp / "inbox", out=tmp / "out") as stack:
        yield stack


def make_upload(inbox: Path, name: str) -> Path:
    folder = inbox / name
    folder.mkdir()
    for sample in SAMPLES:
        shutil.copy(REPO / "data" / "sample" / sample, folder / sample)
    (folder / "_READY").touch()
    return folder


async def _flow_runs(client, deployment: str | None = None, flow: str | None = None) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName, FlowFilter, FlowFilterName

    return await client.read_flow_runs(
        flow_filter=FlowFilter(name=FlowFilterName(any_=[flow])) if flow else None,
        deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])) if deployment else None)


def _final(runs: list) -> list:
    return [r for r in runs if r.state is not None and r.state.is_final()]


@dataclass
class UploadRun:
    flow_run_id: str
    folder: Path


@pytest.fixture(scope="module")
def upload_run(stack: OpsStack) -> UploadRun:
    """serve + watch, one upload folder: the on-upload run it triggers, finished."""
    stack.idflow("serve", "serve", "--inbox", str(stack.inbox), "--out", str(stack.out), "--backend", "ocr")

    async def served(client) -> bool:
        deployment = await client.read_deployment_by_name("extract-folder/on-upload")
        automations = await client.read_automations_by_name("idflow-upload-ready")
        return bool(deployment and automations)

    def ready() -> bool:
        stack.alive("serve")
        try:
            return stack.call(served)
        except Exception:
            return False

    wait_for(ready, 240, "idflow serve to register its deployments and trigger", every=0.5)
    stack.idflow("watch", "watch", str(stack.inbox), "--out", str(stack.out))
    # The watcher is up; the folder is created after it started (its first scan also covers the moment before
    # the OS watch was set; the restart path is unit-tested).
    wait_for(lambda: "watching " in stack.log("watch") or stack.alive("watch"), 240, "idflow watch to start",
             every=0.2)
    folder = make_upload(stack.inbox, FIRST)

    def finished() -> list:
        stack.alive("serve")
        return _final(stack.call(lambda c: _flow_runs(c, deployment="on-upload")))

    runs = wait_for(finished, 900, f"an on-upload run to finish\nserve log:\n{stack.log('serve')}", every=1)
    assert len(runs) == 1, runs
    (run,) = runs
    assert run.state.is_completed(), f"{run.state}\n{stack.log('serve')}"
    assert run.parameters["input_dir"] == folder_reference(stack.out, folder)  # never the folder's path
    assert resolve(stack.out, run.parameters["input_dir"]) == folder.resolve()
    return UploadRun(str(run.id), folder)


def test_upload_folder_triggers_one_completed_run_with_outputs_and_artifacts(stack: OpsStack,
                                                                               upload_run: UploadRun) -> None:
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    summary = json.loads((stack.out / RUNS / f"{upload_run.flow_run_id}.json").read_text())
    assert summary["accounted"] and summary["seen"] == len(SAMPLES) + 1  # + the _READY marker (skipped)
    assert summary["input_dir"] == str(upload_run.folder.resolve()).replace(PRC, MASKED)  # masked, like messages
    assert run_input_dir(summary, stack.out) == upload_run.folder.resolve()  # exact in OUT/sources
    assert any((stack.out / RESULTS).rglob(f"part-{summary['run_id']}-*.parquet"))

    artifacts = stack.call(lambda c: c.read_artifacts(
        artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[upload_run.flow_run_id]))))
    keys = {a.key for a in artifacts if a.key}
    assert {"idflow-run-summary", "idflow-outputs"} <= keys, keys
    assert "progress" in {a.type for a in artifacts}

    run = stack.call(lambda c: c.read_flow_run(upload_run.flow_run_id))
    assert {"backend:ocr", "on-upload"} <= set(run.tags)
    state = json.loads((stack.inbox / STATE_NAME).read_text())
    assert list(state["announced"]) == [FIRST]
    # announced once: the watcher has long seen every file event of the folder by the time its run completed
    watched = (stack.tmp / "watch.log").read_text(errors="replace")  # the whole log (`stack.log` keeps its end)
    assert watched.count("announced upload folder ") == 1, watched  # the folder's name is masked there
    assert len(stack.call(lambda c: _flow_runs(c, deployment="on-upload"))) == 1


def _run_nightly(stack: OpsStack) -> Any:
    from prefect.deployments import run_deployment

    async def go(_client) -> Any:
        return await run_deployment("nightly/nightly", timeout=900, poll_interval=1)

    return stack.call(go)


@pytest.fixture(scope="module")
def nightly_run(stack: OpsStack, upload_run: UploadRun) -> tuple[Any, Path]:
    """watch stopped, a second upload folder and an incomplete one: the nightly run, and the folder it did."""
    stack.stop("watch")  # the second folder is for nightly alone
    second = make_upload(stack.inbox, SECOND)
    (stack.inbox / "batch-003").mkdir()  # incomplete: no marker
    return _run_nightly(stack), second


def test_nightly_processes_only_folders_not_done(stack: OpsStack, nightly_run: tuple[Any, Path]) -> None:
    first, second = nightly_run
    assert first.state.is_completed(), f"{first.state}\n{stack.log('serve')}"
    extract_runs = stack.call(lambda c: _flow_runs(c, flow="extract-folder"))
    by_folder: dict[str, list] = {}
    for r in extract_runs:
        by_folder.setdefault(resolve(stack.out, r.parameters["input_dir"]).name, []).append(r)
    assert len(by_folder[FIRST]) == 1  # the on-upload run; nightly did not redo it
    (child,) = by_folder[SECOND]
    assert child.parent_task_run_id is not None and child.state.is_completed()  # a subflow of nightly
    assert "batch-003" not in by_folder

    ledger = json.loads((stack.out / LEDGER_DIR / LEDGER_NAME).read_text())["done"]
    assert {Path(k).name: v["via"] for k, v in ledger.items()} == {FIRST: "extract-run", SECOND: "nightly"}
    assert ledger[str(second.resolve())]["run_id"] == str(child.id)

    again = _run_nightly(stack)
    assert again.state.is_completed()
    assert len(stack.call(lambda c: _flow_runs(c, flow="extract-folder"))) == 2  # nothing processed twice


def test_ui_shows_the_summary_artifact(browser_binaries: BrowserBinaries, stack: OpsStack,
                                      upload_run: UploadRun) -> None:
    """Headless Chromium (driven by chromedriver) opens the on-upload run's page, clicks the Artifacts tab, sees
    the summary artifact, opens it and sees the rendered markdown. Screenshots are kept for people to look at
    (IDFLOW_SCREENSHOT_DIR, default the test's temp folder)."""
    shots = Path(os.environ.get("IDFLOW_SCREENSHOT_DIR", stack.tmp))
    shots.mkdir(parents=True, exist_ok=True)
    with Browser(stack.tmp, browser_binaries) as browser:
        browser.open(f"{stack.url}/runs/flow-run/{upload_run.flow_run_id}")
        browser.click(browser.wait_for_element("css selector", "li#artifacts"))
        wait_for(lambda: "idflow-run-summary" in browser.text(), 60, "the summary artifact on the Artifacts tab")
        card = browser.wait_for_element("xpath", "//*[normalize-space(text())='idflow-run-summary']")
        browser.script("arguments[0].scrollIntoView({block: 'center'})", card)
        browser.screenshot(shots / "flow-run-artifacts.png")
        browser.click(card)
        text = wait_for(lambda: (t := browser.text()) and "Cost and speed" in t and t, 60,
                        "the summary markdown to render")
        browser.screenshot(shots / "run-summary-artifact.png")
    assert f"idflow run {upload_run.flow_run_id[:8]}" in text and "Failures by reason" in text


def test_retry_failures_deployment_runs_under_the_request_limit(stack: OpsStack, upload_run: UploadRun) -> None:
    """`idflow serve` created the global request limit; the retry deployment runs (the samples' failures are
    not retryable, so it resolves nothing and retries nothing)."""
    from prefect.deployments import run_deployment

    limit = stack.call(lambda c: c.read_global_concurrency_limit_by_name("idflow-requests-ocr"))
    assert limit.limit == 8

    async def go(_client) -> Any:
        return await run_deployment("retry-failures/retry-failures", timeout=600, poll_interval=1)

    run = stack.call(go)
    assert run.state.is_completed(), f"{run.state}\n{stack.log('serve')}"
    assert run.state.is_completed() and not (stack.out / RUNS / f"{run.id}.json").exists()  # nothing retried


def test_prefect_yaml_deploys_to_a_process_pool(stack: OpsStack, upload_run: UploadRun) -> None:
    """After the other runs: it replaces the served deployments of the same names (the masking check after it
    runs nothing)."""
    stack.stop("serve")
    env = {**stack.env, "IDFLOW_INBOX": str(stack.inbox), "IDFLOW_OUT": str(stack.out),
           "IDFLOW_BACKEND": "ocr", "IDFLOW_TIMEZONE": "Asia/Shanghai"}
    prefect = str(Path(sys.executable).parent / "prefect")
    for cmd in ([prefect, "work-pool", "create", "idflow-process", "--type", "process"],
                [prefect, "--no-prompt", "deploy", "--all", "--prefect-file", "deployments/prefect.yaml"]):
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    async def check(client) -> None:
        for name in ("extract-folder/on-upload", "nightly/nightly", "retry-failures/retry-failures"):
            deployment = await client.read_deployment_by_name(name)
            assert deployment.work_pool_name == "idflow-process"
            assert deployment.parameters["out_dir"] == str(stack.out)
        nightly = await client.read_deployment_by_name("nightly/nightly")
        assert nightly.schedules[0].schedule.cron == "0 2 * * *"
        assert nightly.schedules[0].schedule.timezone == "Asia/Shanghai"
        on_upload = await client.read_deployment_by_name("extract-folder/on-upload")
        automations = [a for a in await client.read_automations()
                       if a.actions and getattr(a.actions[0], "deployment_id", None) == on_upload.id]
        assert automations, "the on-upload trigger was not created"
        trigger = automations[0].trigger
        assert trigger.match.root == {"prefect.resource.id": "idflow.upload.*"}
        assert automations[0].actions[0].parameters["input_dir"] == "{{ event.payload.ref }}"

    stack.call(check)


def test_an_upload_folder_named_with_an_id_number_reaches_prefect_masked(stack: OpsStack, upload_run: UploadRun,
                                                                          nightly_run: tuple[Any, Path]) -> None:
    """After every run of the file (on-upload, nightly, retry, the deploy): the folders' ID number is searched for
    in the events, flow runs (names, parameters), artifacts and logs read through the Prefect API, in every file of
    the server's database and home, in the processes' consoles, and in OUT's files other than the ones documented
    as holding personal data."""
    first, second = upload_run.folder, nightly_run[1]
    runs = stack.call(lambda c: _flow_runs(c, flow="extract-folder"))
    assert sorted(resolve(stack.out, r.parameters["input_dir"]).name for r in runs) == sorted([first.name,
                                                                                            second.name])

    async def everything(client: Any) -> dict[str, Any]:
        page = (await client._client.post("/events/filter", json={"limit": 50})).json()
        events = page["events"]
        while page.get("next_page"):  # 50 a page at most
            page = (await client._client.get(page["next_page"])).json()
            events += page["events"]
        flow_runs = await client.read_flow_runs()
        return {"events": events,
                "flow_runs": [{"name": r.name, "parameters": r.parameters} for r in flow_runs],
                "artifacts": [a.model_dump(mode="json") for a in await client.read_artifacts()],
                "logs": [log.message for log in await client.read_logs()]}

    seen = stack.call(everything)
    uploads = [e for e in seen["events"] if e["event"] == "idflow.upload.ready"]
    assert len(uploads) == 1 and uploads[0]["payload"]["path"].endswith(f"scans_{MASKED}")
    assert uploads[0]["payload"]["ref"] == folder_reference(stack.out, first)
    assert any(MASKED in r["name"] for r in seen["flow_runs"]) and seen["artifacts"] and seen["logs"]
    for what, found in seen.items():
        assert PRC not in json.dumps(found, ensure_ascii=False), what

    # the server's database and home, the consoles of the server, serve and watch
    for path in (p for p in stack.tmp.rglob("*") if p.is_file() and not p.is_relative_to(stack.inbox)
                 and not p.is_relative_to(stack.out)):
        assert PRC.encode() not in path.read_bytes(), path
    others = [p for p in stack.out.rglob("*") if p.is_file() and p.relative_to(stack.out).parts[0] not in PERSONAL]
    assert any(p.parent.name == "runs" for p in others)
    for path in others:
        assert PRC.encode() not in path.read_bytes(), path
