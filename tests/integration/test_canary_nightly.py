"""Drift canaries on a real Prefect server (`prefect server start`): the nightly flow reads the canary folder with
its backend; a canary whose manifest disagrees with its documents emits `idflow.canary.degraded`, read back
through the Prefect API, and a healthy one emits none. Canary documents never reach OUT's results or a run's
accounting, and neither the event nor the artifact carries a value read.

The backend is a loopback model answering from the sample's ground truth (tests/support/mistake_server.py): the
canary works the same for every backend, and the embedded reader's reading of these pages is
test_flow_extract's subject (reading them here again, five times, was most of this file's time)."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.ingest.discover import sha256_file
from pipeline.ops.canary import CANARY_DIR, CANARY_EVENT
from pipeline.store.parquet import RESULTS, RUNS, read_table
from tests.support.mistake_server import truth_model
from tests.support.paths import REPO
from tests.support.prefect_server import Stack, prefect_server, wait_for

SAMPLE = REPO / "data" / "sample"
CANARY = ("passport_td3.jpg", "id_card_td1.jpg")  # read right by the embedded backend too (test_flow_extract)
UPLOAD = "cn_front.jpg"
KEY = "sk-canary-3c9e2f"

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with prefect_server(tmp_path_factory.mktemp("canary")) as stack:
        yield stack


def canary_folder(folder: Path, *, wrong: bool) -> tuple[Path, list[str]]:
    """The canary documents with their manifest (the `idflow eval` format); `wrong`: the manifest's names and
    numbers are not what the documents show. Returns the folder and every value its manifest holds."""
    truth = {t["path"]: t for t in json.loads((REPO / "data" / "sample_ground_truth.json").read_text("utf-8"))}
    folder.mkdir(parents=True)
    items = []
    for name in CANARY:
        shutil.copy(SAMPLE / name, folder / name)
        item = dict(truth[name])
        if wrong:
            item["name"], item["id_number"] = "NOBODY KNOWN", "X99999999"
        items.append(item)
    (folder / "manifest.json").write_text(json.dumps(items), encoding="utf-8")
    values = [str(v) for t in (*items, *(truth[n] for n in CANARY)) for k, v in t.items()
              if k in ("name", "id_number") and v]
    return folder, values


@pytest.fixture(scope="module")
def model() -> Iterator[dict[str, str]]:
    with truth_model(REPO / "data" / "sample_ground_truth.json", KEY) as env:
        yield env


def run_nightly(stack: Stack, inbox: Path, out: Path) -> dict[str, Any]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.nightly import nightly

    with temporary_settings({PREFECT_API_URL: stack.api}):
        return asyncio.run(nightly(str(inbox), str(out), backend="openai"))


def canary_events(stack: Stack) -> list[dict[str, Any]]:
    async def read(client: Any) -> list[dict[str, Any]]:
        response = await client.request("POST", "/events/filter", json={
            "filter": {"event": {"prefix": ["idflow.canary."]}}, "limit": 50})
        response.raise_for_status()
        return response.json()["events"]

    return stack.call(read)


def canary_artifacts(stack: Stack) -> list[str]:
    async def read(client: Any) -> list[str]:
        from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

        found = await client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["idflow-canary"])))
        return [str(a.data) for a in found]

    return stack.call(read)


def test_a_canary_whose_answers_drift_emits_the_event_and_a_healthy_one_none(
        stack: Stack, model: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in model.items():
        monkeypatch.setenv(name, value)
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    (inbox / "batch-001").mkdir(parents=True)
    shutil.copy(SAMPLE / UPLOAD, inbox / "batch-001" / UPLOAD)
    (inbox / "batch-001" / "_READY").touch()
    healthy, healthy_values = canary_folder(tmp_path / "canary-ok", wrong=False)
    drifted, drifted_values = canary_folder(tmp_path / "canary-drifted", wrong=True)

    monkeypatch.setenv("IDFLOW_CANARY_DIR", str(healthy))
    first = run_nightly(stack, inbox, out)
    assert first["done"] == ["batch-001"]
    assert first["canary"]["accuracy"] == 1.0 and not first["canary"]["degraded"], first["canary"]
    assert first["canary"]["documents"] == len(CANARY) and first["canary"]["backend"] == "openai"
    # The canary's documents are not results, and the folder's run counted its own files only (and the marker).
    stored = {r["sha256"] for r in read_table(out, RESULTS, ["sha256"]).to_pylist()}
    assert stored == {sha256_file(SAMPLE / UPLOAD)}
    (summary,) = [json.loads(p.read_text("utf-8")) for p in (out / RUNS).glob("*.json")]
    assert (summary["seen"], summary["results"], summary["skipped_by_reason"]) == (2, 1, {"marker": 1})

    monkeypatch.setenv("IDFLOW_CANARY_DIR", str(drifted))
    second = run_nightly(stack, inbox, out)
    assert second["done"] == [] and second["already_done"] == ["batch-001"]  # the canary still ran
    canary = second["canary"]
    assert canary["degraded"] and canary["accuracy"] == pytest.approx(2 / 6, abs=1e-4), canary
    assert canary["per_field"] == {"name": 0.0, "id_number": 0.0, "expiry_date": 1.0}

    # The event arrives (posted after the healthy run's would have been: if that one had emitted, it is there too);
    # the server stores events in the background, which on a loaded machine takes minutes, not seconds.
    events = wait_for(lambda: canary_events(stack), 300, f"the {CANARY_EVENT} event", every=1.0)
    runs = {json.loads(p.read_text("utf-8"))["degraded"]: p.stem for p in (out / CANARY_DIR).glob("*.json")}
    assert set(runs) == {False, True}
    (event,) = events
    assert event["event"] == CANARY_EVENT and event["resource"]["prefect.resource.id"] == "idflow.canary.openai"
    assert event["payload"]["flow_run_id"] == runs[True] != runs[False]
    assert event["payload"]["accuracy"] == canary["accuracy"] and event["payload"]["min_accuracy"] == 0.95
    assert {r["prefect.resource.id"] for r in event["related"]} >= {f"prefect.flow-run.{runs[True]}"}

    artifacts = canary_artifacts(stack)
    assert len(artifacts) == 2 and any("DEGRADED" in a for a in artifacts) and any("healthy" in a for a in artifacts)
    published = json.dumps(event) + "".join(artifacts)
    for value in {*healthy_values, *drifted_values}:
        assert value not in published, value
