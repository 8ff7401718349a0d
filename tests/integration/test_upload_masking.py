"""An ID number in an upload folder's name stays masked in Prefect when deployments start the runs: a real
`prefect server start`, `idflow serve` and `idflow watch`; a folder `scans_<PRC number>/` with its marker starts
the on-upload run through the event trigger, a second such folder is done by the nightly deployment. Then the
number is searched for in the events, flow runs (names, parameters), artifacts and logs read through the Prefect
API, in every file of the server's database and home, in the processes' consoles, and in OUT's files other than
the ones documented as holding personal data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeline.ingest.sources import folder_reference, resolve
from tests.support.chat_server import ChatServer, ServerConfig
from tests.support.idflow_process import unique_scans
from tests.support.prefect_server import prefect_server, wait_for

pytestmark = pytest.mark.timeout(1500)

KEY = "sk-upload-paths-7c3e9b1d5a2f"
PRC = "320106197701013454"  # a valid PRC resident ID number (check digit 4)
MASKED = "3201**********3454"
PERSONAL = ("results", "failures", "review", "sources")  # OUT's files documented as holding personal data


async def _extract_runs(client: Any) -> list:
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName

    return await client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["extract-folder"])))


def _upload(inbox: Path, name: str) -> Path:
    folder = unique_scans(inbox / name, 2)
    (folder / "_READY").touch()
    return folder


def test_an_upload_folder_named_with_an_id_number_reaches_prefect_masked(tmp_path: Path) -> None:
    from prefect.deployments import run_deployment

    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    with ChatServer(ServerConfig(api_key=KEY)) as chat, prefect_server(tmp_path) as stack:
        stack.env.update(TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm", TAOTOKEN_BASE_URL=chat.base_url)
        stack.idflow("serve", "serve", "--inbox", str(inbox), "--out", str(out), "--backend", "openai")

        async def served(client: Any) -> bool:
            return bool(await client.read_deployment_by_name("extract-folder/on-upload")
                        and await client.read_automations_by_name("idflow-upload-ready"))

        def ready() -> bool:
            stack.alive("serve")
            try:
                return stack.call(served)
            except Exception:
                return False

        wait_for(ready, 300, "idflow serve to register its deployments and trigger", every=2)
        stack.idflow("watch", "watch", str(inbox), "--out", str(out))
        wait_for(lambda: "watching " in stack.log("watch") or stack.alive("watch"), 240, "idflow watch", every=0.2)
        first = _upload(inbox, f"scans_{PRC}")

        def finished() -> list:
            stack.alive("serve")
            return [r for r in stack.call(_extract_runs) if r.state is not None and r.state.is_final()]

        (run,) = wait_for(finished, 900, f"the on-upload run\n{stack.log('serve')}", every=2)
        assert run.state.is_completed(), stack.log("serve")
        assert run.parameters["input_dir"] == folder_reference(out, first)
        assert resolve(out, run.parameters["input_dir"]) == first.resolve()

        stack.stop("watch")  # the second folder is for the nightly deployment alone
        second = _upload(inbox, f"batch_{PRC}_b")
        nightly = stack.call(lambda c: run_deployment("nightly/nightly", timeout=900, poll_interval=2))
        assert nightly.state.is_completed(), stack.log("serve")
        runs = stack.call(_extract_runs)
        assert sorted(resolve(out, r.parameters["input_dir"]).name for r in runs) == sorted([first.name,
                                                                                            second.name])
        assert all(r.state.is_completed() for r in runs)  # nightly left the on-upload folder alone

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
    assert uploads[0]["payload"]["ref"] == folder_reference(out, first)
    assert any(MASKED in r["name"] for r in seen["flow_runs"]) and seen["artifacts"] and seen["logs"]
    for what, found in seen.items():
        assert PRC not in json.dumps(found, ensure_ascii=False), what

    # the server's database and home, the consoles of the server, serve and watch
    for path in (p for p in tmp_path.rglob("*") if p.is_file() and not p.is_relative_to(inbox)
                 and not p.is_relative_to(out)):
        assert PRC.encode() not in path.read_bytes(), path
    others = [p for p in out.rglob("*") if p.is_file() and p.relative_to(out).parts[0] not in PERSONAL]
    assert any(p.parent.name == "runs" for p in others)
    for path in others:
        assert PRC.encode() not in path.read_bytes(), path
