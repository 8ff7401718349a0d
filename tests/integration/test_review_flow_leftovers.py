"""The `review` flow leaves no personal data in Prefect however a question ends, against a real Prefect server:
a timeout, SIGTERM while paused, a cancel from the UI, SIGKILL (the next review of the same OUT cleans up), and
the leftovers of ended review runs (any review cleans up). Also: every document type of the schema can be
confirmed in the form, the form names the (masked) file, and a refusal does not quote what was typed.

The output folders are made directly (results Parquet + run summary; no OCR run): only the flow is under test.
Real processes for `idflow review --interactive`; answers go through the REST API as the UI sends them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from pipeline.review.corrections import read_corrections
from pipeline.store.parquet import RESULT_SCHEMA, RESULTS, write_part, write_run_summary
from pipeline.validate import schema
from tests.integration.test_review_flow import _answer, _env
from tests.support.paths import REPO
from tests.support.prefect_server import wait_for

NUMBER = "110101199003071233"  # valid MOD 11-2
OTHER_NUMBER = "11010519491231002X"  # valid too; typed into the expiry field by mistake
SCHEMA_DOC_TYPES = schema()["properties"]["doc_type"]["enum"]
# A valid reading for every document type (the numbers pass the checks their type requires)
VALID = {"cn_id": NUMBER, "cn_permanent_residence": "911840198508150023"}

pytestmark = pytest.mark.timeout(900)


def _make_out(out: Path, docs: list[dict[str, Any]], confidence: float = 0.5) -> Path:
    """OUT with one extract run whose records are `docs` (source_path, doc_type, name, id_number, expiry_date),
    every field read with `confidence` (below the 0.9 threshold: each goes to a person)."""
    now = datetime.now(timezone.utc)
    rows = []
    for n, doc in enumerate(docs):
        row: dict[str, Any] = {field.name: None for field in RESULT_SCHEMA}
        row |= {"page": 0, "sha256": f"{n:064x}", "orientation": "landscape", "expiry_long_term": False,
                "checks": ["schema"], "check_failures": [], "fingerprint": "f", "run_id": "r1", "processed_at": now,
                "worker": "local", "backend": "ocr"}
        row |= {**doc, "expiry_date": date.fromisoformat(doc["expiry_date"])}
        row["source_path_bytes"] = os.fsencode(doc["source_path"])
        for name in ("name", "id_number", "expiry_date"):
            row[f"{name}_state"], row[f"{name}_confidence"] = "present", confidence
        rows.append(row)
    write_part(out, RESULTS, RESULT_SCHEMA, rows, run_id="r1", run_date=now.date(), part=0)
    write_run_summary(out, {"run_id": "r1", "input_dir": str(out.parent / "in"), "seen": len(docs),
                            "results": len(docs), "failures": 0, "skipped": 0, "backend": "ocr"})
    return out


def _doc(source_path: str, doc_type: str = "cn_id") -> dict[str, Any]:
    return {"source_path": source_path, "doc_type": doc_type, "name": "ZHANG WEI",
            "id_number": VALID.get(doc_type, "E1234567"), "expiry_date": "2030-01-01"}


def _runs(client, out: Path) -> list[Any]:
    """The review runs of OUT, newest first."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["review"])),
                                 sort=FlowRunSort.EXPECTED_START_TIME_DESC)
    return [r for r in runs if Path(r.parameters.get("out_dir", "/nowhere")).resolve() == out.resolve()]


def _inputs(client, run_id: Any) -> list[str]:
    return sorted(i.key for i in client.filter_flow_run_input(run_id, "paused", limit=100, exclude_keys=set()))


def _paused(client, out: Path, seen: set[str], skip: tuple[Any, ...] = ()) -> Any:
    """The newest review run of OUT once paused on a question not answered yet, with its form stored."""
    runs = [r for r in _runs(client, out) if r.id not in skip]
    if not runs or not runs[0].state.is_paused():
        return None
    run = runs[0]
    keyset = run.state.state_details.run_input_keyset
    if not keyset or keyset["schema"] in seen:
        return None
    keys = _inputs(client, run.id)
    return run if keyset["schema"] in keys and keyset["description"] in keys else None


def _start_review(api: str, out: Path, log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "idflow", "review", str(out), "--interactive", *args],
                            env=_env(api), cwd=REPO, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _form(client, run: Any) -> tuple[dict[str, Any], str]:
    """The stored form of the run's current question: (schema properties, description)."""
    keyset = run.state.state_details.run_input_keyset
    properties = json.loads(client.read_flow_run_input(run.id, keyset["schema"]))["properties"]
    return properties, client.read_flow_run_input(run.id, keyset["description"])


def _no_session_locks(out: Path) -> bool:
    return not list((out / "review").glob(".session-*"))


def test_a_timed_out_question_leaves_no_inputs_in_prefect(prefect_api: str, tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import StateType

    from flows.review import review

    out = _make_out(tmp_path / "out", [_doc("a.jpg")])
    result = asyncio.run(review(out_dir=str(out), timeout_s=5))
    assert result["timed out"] == 1
    with get_client(sync_client=True) as client:
        [run] = _runs(client, out)
        assert StateType.PAUSED in [s.type for s in client.read_flow_run_states(run.id)]  # it did ask
        assert _inputs(client, run.id) == []
    assert _no_session_locks(out)


def test_sigterm_while_paused_deletes_the_form_and_the_form_names_the_masked_file(prefect_api: str,
                                                                                 tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    out = _make_out(tmp_path / "out", [_doc(f"scans/zhang{NUMBER}.jpg")])
    review = _start_review(prefect_api, out, tmp_path / "review.log")
    try:
        with get_client(sync_client=True) as client:
            run = wait_for(lambda: _paused(client, out, set()), 300, "the question")
            properties, description = _form(client, run)
            assert properties["id_number"]["default"] == NUMBER  # the personal data the form holds while asked
            assert f"scans/zhang{NUMBER[:4]}{'*' * 10}{NUMBER[-4:]}.jpg" in description
            assert NUMBER not in description
            os.killpg(review.pid, signal.SIGTERM)
            assert review.wait(timeout=120) == 128 + signal.SIGTERM  # the shell's code for it, and one line
            assert "stopped by signal 15" in (tmp_path / "review.log").read_text(errors="replace")
            assert client.read_flow_run(run.id).state.is_crashed()
            assert _inputs(client, run.id) == []
    finally:
        _stop(review)
    assert _no_session_locks(out)


def test_cancelling_a_paused_review_in_the_ui_ends_it_and_deletes_the_form(prefect_api: str,
                                                                          tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    out = _make_out(tmp_path / "out", [_doc("a.jpg"), _doc("b.jpg")])
    log = tmp_path / "review.log"
    review = _start_review(prefect_api, out, log)
    try:
        with get_client(sync_client=True) as client:
            run = wait_for(lambda: _paused(client, out, set()), 300, "the question")
            client.set_flow_run_state(run.id, Cancelling())  # what the UI's Cancel button sends
            assert review.wait(timeout=300) == 0, log.read_text(errors="replace")[-3000:]
            assert "cancelled 1" in log.read_text(errors="replace")
            assert wait_for(lambda: client.read_flow_run(run.id).state.is_cancelled(), 60, "Cancelled")
            assert _inputs(client, run.id) == []
    finally:
        _stop(review)
    assert _no_session_locks(out)


def test_a_killed_session_s_form_is_deleted_by_the_next_review_of_the_same_out(prefect_api: str,
                                                                              tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    out = _make_out(tmp_path / "out", [_doc("a.jpg")])
    first = _start_review(prefect_api, out, tmp_path / "first.log")
    second = None
    try:
        with get_client(sync_client=True) as client:
            killed = wait_for(lambda: _paused(client, out, set()), 300, "the first session's question")
            os.killpg(first.pid, signal.SIGKILL)  # cannot be handled: the form stays...
            first.wait(timeout=30)
            assert _inputs(client, killed.id) and client.read_flow_run(killed.id).state.is_paused()

            second = _start_review(prefect_api, out, tmp_path / "second.log")  # ...until the next session starts
            run = wait_for(lambda: _paused(client, out, set(), skip=(killed.id,)), 300, "the second question")
            assert _inputs(client, killed.id) == []
            assert client.read_flow_run(killed.id).state.is_crashed()
            _answer(prefect_api, run, set(), decision="stop reviewing", doc_type="cn_id", name="", id_number="",
                    expiry_date="", reviewer="")
            assert second.wait(timeout=300) == 0, (tmp_path / "second.log").read_text(errors="replace")[-3000:]
            assert _inputs(client, run.id) == []
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    assert _no_session_locks(out)


def test_any_review_deletes_the_inputs_ended_review_runs_left_and_keeps_live_ones(prefect_api: str,
                                                                                  tmp_path: Path) -> None:
    """Leftovers as the old flow left them (a timed-out or crashed run kept its form), and a question that is
    still open (its pause deadline ahead) in another folder: the start of a review of any OUT deletes the first
    and leaves the second."""
    from prefect.client.orchestration import get_client
    from prefect.states import Crashed, Failed, Paused, Running

    from flows.review import review

    stale = {}
    with get_client(sync_client=True) as client:
        for label, end in (("crashed", Crashed()), ("failed", Failed()),
                           ("expired", Paused(pause_expiration_time=datetime.now(timezone.utc) - timedelta(hours=1))),
                           ("live", Paused(timeout_seconds=3600))):
            run = client.create_flow_run(review, parameters={"out_dir": str(tmp_path / label)})
            client.set_flow_run_state(run.id, Running(), force=True)
            client.set_flow_run_state(run.id, end, force=True)
            for suffix in ("schema", "description"):
                client.create_flow_run_input(run.id, f"paused-1-{suffix}", json.dumps({"id_number": NUMBER}))
            stale[label] = run.id

    out = _make_out(tmp_path / "out", [_doc("a.jpg")], confidence=1.0)  # nothing to ask
    assert asyncio.run(review(out_dir=str(out)))["asked"] == 0
    with get_client(sync_client=True) as client:
        assert {label: _inputs(client, run_id) for label, run_id in stale.items()} == {
            "crashed": [], "failed": [], "expired": [], "live": ["paused-1-description", "paused-1-schema"]}


def test_every_schema_doc_type_can_be_confirmed_and_a_refusal_masks_what_was_typed(prefect_api: str,
                                                                                  tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    docs = [_doc(f"{n}_{doc_type}.jpg", doc_type) for n, doc_type in enumerate(SCHEMA_DOC_TYPES)]
    out = _make_out(tmp_path / "out", docs)
    log = tmp_path / "review.log"
    review = _start_review(prefect_api, out, log, "--limit", str(len(docs)))
    seen: set[str] = set()
    try:
        with get_client(sync_client=True) as client:
            for n, doc in enumerate(docs):
                run = wait_for(lambda: _paused(client, out, seen), 300, f"question {n + 1}")
                properties, description = _form(client, run)
                assert f"`{doc['source_path']}`" in description  # the form names the file judged
                assert set(properties["doc_type"]["enum"]) == set(SCHEMA_DOC_TYPES)
                prefill = {k: v.get("default") for k, v in properties.items()}
                assert prefill["doc_type"] == doc["doc_type"] and prefill["id_number"] == doc["id_number"]
                if n == 0:  # a number typed into the expiry field: refused, and not quoted in what Prefect stores
                    _answer(prefect_api, run, seen, **{**prefill, "expiry_date": OTHER_NUMBER, "reviewer": "Ada"})
                    run = wait_for(lambda: _paused(client, out, seen), 120, "the question asked again")
                    properties, description = _form(client, run)
                    assert "Refused" in description and "expiry_date" in description
                    assert OTHER_NUMBER not in description and OTHER_NUMBER[:-1] not in description
                    assert properties["expiry_date"]["default"] == OTHER_NUMBER  # the form keeps what was typed
                _answer(prefect_api, run, seen, **{**prefill, "reviewer": "Ada"})  # confirm what the machine read
            assert review.wait(timeout=300) == 0, log.read_text(errors="replace")[-3000:]
            assert _inputs(client, run.id) == []
    finally:
        _stop(review)
    assert OTHER_NUMBER not in log.read_text(errors="replace")
    rows = read_corrections(out).to_pylist()
    assert sorted(r["doc_type_after"] for r in rows) == sorted(SCHEMA_DOC_TYPES)
    assert {r["decision"] for r in rows} == {"confirmed"}
