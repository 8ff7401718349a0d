"""The `review` flow against a real Prefect server: it pauses with a RunInput form prefilled with what the
machine read, answers are submitted through the REST API as the UI does, a correction with a wrong check digit
is refused with the reason and asked again, the right one lands in OUT/corrections/, and `idflow show` reports
the document as corrected. Real processes: `idflow run` and `idflow review --interactive`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline.review.corrections import corrected_keys, final_records, read_corrections
from pipeline.review.failure_queue import open_entries
from pipeline.store.parquet import RESULTS, read_table
from tests.support.paths import REPO
from tests.support.prefect_server import wait_for
from tests.support.review_data import review_inputs

RIGHT_NUMBER = "110101199003071233"  # cn_front.jpg: valid MOD 11-2 check character
WRONG_NUMBER = "110101199003071234"  # one check digit off

pytestmark = pytest.mark.timeout(900)


def _env(api: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PREFECT_API_URL": api, "IDFLOW_REVIEW_THRESHOLD": "0.9"}


def _review_run(client, out: Path) -> Any:
    """The newest review run of OUT (other tests run review flows on the same server)."""
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=["review"])),
                                 sort=FlowRunSort.EXPECTED_START_TIME_DESC)
    runs = [r for r in runs if Path(r.parameters.get("out_dir", "/nowhere")).resolve() == out.resolve()]
    return runs[0] if runs else None


def _paused(client, seen: set[str], out: Path) -> Any:
    """The review run of OUT once it is paused on a question not answered yet (a new input keyset) whose form is
    stored: the flow saves the form just after the server accepted the Paused state."""
    run = _review_run(client, out)
    if run is None or not run.state.is_paused():
        return None
    keyset = run.state.state_details.run_input_keyset
    if not keyset or keyset["schema"] in seen:
        return None
    try:
        client.read_flow_run_input(run.id, keyset["schema"])
        client.read_flow_run_input(run.id, keyset["description"])
    except httpx.HTTPStatusError as exc:
        if exc.response.status_code == 404:
            return None
        raise
    return run


def _answer(api: str, run: Any, seen: set[str], **values: Any) -> None:
    """Submit the form the way the Prefect UI does: POST /flow_runs/{id}/resume with run_input."""
    seen.add(run.state.state_details.run_input_keyset["schema"])

    def submit() -> httpx.Response | None:
        response = httpx.post(f"{api}/flow_runs/{run.id}/resume", json={"run_input": values}, timeout=120)
        if response.status_code == 503:  # SQLite "database is locked" on a loaded machine: submit again
            return None
        response.raise_for_status()
        return response

    response = wait_for(submit, 300, "the server to accept the answer", every=2)
    assert response.json()["status"] == "ACCEPT", response.text


def test_review_flow_refuses_a_wrong_check_digit_and_stores_the_right_correction(prefect_api: str,
                                                                                 tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client

    inbox = review_inputs(tmp_path / "in", blurred={"cn_front.jpg": 4})
    (inbox / "truncated.png").write_bytes((REPO / "data" / "sample" / "truncated.png").read_bytes())
    out = tmp_path / "out"
    env = _env(prefect_api)
    done = subprocess.run([sys.executable, "-m", "idflow", "run", str(inbox), "--out", str(out)], env=env,
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    blurred = read_table(out, RESULTS).to_pylist()[0]
    assert blurred["source_path"] == "blurred_cn_front.jpg" and blurred["id_number"] == RIGHT_NUMBER
    assert blurred["name_state"] == "unreadable"  # below the threshold: goes to a person

    log = (tmp_path / "review.log").open("wb")
    review = subprocess.Popen([sys.executable, "-m", "idflow", "review", str(out), "--interactive", "--limit", "2"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    seen: set[str] = set()
    try:
        with get_client(sync_client=True) as client:
            # 1. The failure needs a person most (never retried): it comes first. Skip it.
            run = wait_for(lambda: _paused(client, seen, out), 300, "the first question")
            keyset = run.state.state_details.run_input_keyset
            description = client.read_flow_run_input(run.id, keyset["description"])
            assert "decode_error" in description and "`truncated.png`" in description  # names the file
            _answer(prefect_api, run, seen, decision="skip for now", doc_type="unknown", name="", id_number="",
                    expiry_date="", reviewer="")

            # 2. The low-confidence record: prefilled with the machine's reading; the description masks numbers.
            run = wait_for(lambda: _paused(client, seen, out), 120, "the second question")
            keyset = run.state.state_details.run_input_keyset
            schema = json.loads(client.read_flow_run_input(run.id, keyset["schema"]))
            prefill = {k: v.get("default") for k, v in schema["properties"].items()}
            assert prefill["id_number"] == RIGHT_NUMBER and prefill["doc_type"] == "cn_id" and prefill["name"] == ""
            description = client.read_flow_run_input(run.id, keyset["description"])
            assert "low_confidence" in description and RIGHT_NUMBER not in description
            assert "1101**********1233" in description and "#doc-" in description
            assert "`blurred_cn_front.jpg`" in description
            _answer(prefect_api, run, seen, decision="save these values", doc_type="cn_id", name="张伟",
                    id_number=WRONG_NUMBER, expiry_date="", reviewer="Ada")

            # 3. Refused with the reason and asked again, with what was typed kept in the form.
            run = wait_for(lambda: _paused(client, seen, out), 120, "the question asked again")
            keyset = run.state.state_details.run_input_keyset
            description = client.read_flow_run_input(run.id, keyset["description"])
            assert "Refused" in description and "cn_id.checksum" in description and WRONG_NUMBER not in description
            schema = json.loads(client.read_flow_run_input(run.id, keyset["schema"]))
            assert schema["properties"]["id_number"]["default"] == WRONG_NUMBER
            assert schema["properties"]["name"]["default"] == "张伟"
            assert read_corrections(out) is None  # nothing stored for a refused answer
            _answer(prefect_api, run, seen, decision="save these values", doc_type="cn_id", name="张伟",
                    id_number=RIGHT_NUMBER, expiry_date="", reviewer="Ada")

            assert review.wait(timeout=300) == 0, (tmp_path / "review.log").read_text(errors="replace")[-3000:]
            final = client.read_flow_run(run.id)
            assert final.state.is_completed()
            # The answers (personal data) are not left in Prefect's database once read.
            assert client.filter_flow_run_input(run.id, "paused", limit=100, exclude_keys=set()) == []
            artifacts = {a.key: a for a in client.read_artifacts() if a.flow_run_id == run.id}
            assert {"idflow-review-page", "idflow-review-summary"} <= set(artifacts)
            assert RIGHT_NUMBER not in json.dumps([a.data for a in artifacts.values()], ensure_ascii=False)
    finally:
        if review.poll() is None:
            os.killpg(review.pid, signal.SIGKILL)
            review.wait(timeout=30)

    rows = read_corrections(out).to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert (row["sha256"], row["page"], row["who"], row["decision"]) == (blurred["sha256"], 0, "Ada", "corrected")
    assert (row["name_before"], row["name_after"]) == (None, "张伟")
    assert (row["id_number_before"], row["id_number_after"]) == (RIGHT_NUMBER, RIGHT_NUMBER)
    assert list((out / "corrections").rglob("*.parquet"))[0].name.startswith("part-")

    key = f"{blurred['sha256']}:0"
    assert corrected_keys(out) == {key}
    merged = {f"{r['sha256']}:{r['page']}": r for r in final_records(out).to_pylist()}
    assert merged[key]["decided_by"] == "person" and merged[key]["name"] == "张伟"
    entries, _ = open_entries(out)
    assert [e.source_path for e in entries] == ["truncated.png"]  # the skipped failure stays in the queue

    shown = subprocess.run([sys.executable, "-m", "idflow", "show", str(out)], env={**env, "COLUMNS": "200"},
                           cwd=REPO, capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "corrected by a person (1 documents" in shown.stdout and "blurred_cn_front.jpg" in shown.stdout
    assert "1101**********1233" in shown.stdout and RIGHT_NUMBER not in shown.stdout
    page = (out / "review" / "open.html").read_text(encoding="utf-8")  # the session's page: all of OUT
    assert "Decided by Ada" in page  # the page was rewritten after the session
