"""Consistency across OUT through what a user runs: two `idflow run`s on one OUT, the second folder holding a
passport with the first one's number under another name. Both records are on the second run's review page and in
the queue with `number_conflict`, the second run's summary counts them, and no number is unmasked on the console
or in the summary."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

from pipeline.review.conflicts import CONFLICT_REASON
from pipeline.review.page import page_path
from pipeline.review.queue import build_queue
from pipeline.store.parquet import RUNS
from synth import render
from synth.sample_set import sample_people
from tests.support.idflow_process import idflow, run_env
from tests.support.paths import REPO

NUMBER = "UT4815926"  # data/sample/passport_td3.jpg: ERIKSSON ANNA MARIA


def _run(folder: Path, out: Path, tmp: Path, name: str, api: str) -> str:
    """`idflow run` on the session's Prefect API (a local server of its own would cost each run 15-30 s)."""
    log = tmp / f"{name}.log"
    env = run_env(tmp, PREFECT_API_URL=api)
    code = idflow("run", str(folder), "--out", str(out), env=env, cwd=tmp, log=log).wait(timeout=600)
    console = log.read_text(errors="replace")
    assert code == 0, console[-3000:]
    return console


def test_the_same_number_under_another_name_in_a_later_folder_flags_both_records(tmp_path: Path,
                                                                                 prefect_api: str) -> None:
    first, second, out = tmp_path / "monday", tmp_path / "tuesday", tmp_path / "out"
    first.mkdir()
    second.mkdir()
    shutil.copy(REPO / "data" / "sample" / "passport_td3.jpg", first / "eriksson.jpg")
    other = dataclasses.replace(sample_people()["eriksson"], surname="LARSSON", given_names="EVA")
    render.passport_td3(other).image.save(second / "larsson.jpg", quality=90)  # type: ignore[arg-type]

    monday = _run(first, out, tmp_path, "monday", prefect_api)
    assert "number conflicts" not in monday
    tuesday = _run(second, out, tmp_path, "tuesday", prefect_api)

    summaries = [json.loads(p.read_text("utf-8")) for p in (out / RUNS).glob("*.json")]
    (latest,) = [s for s in summaries if s["input_dir"].endswith("tuesday")]
    assert latest["number_conflicts"] == {"records": 1, "other_records": 1, "numbers": ["UT*****26"]}
    assert "number conflicts: 1 of this run's records and 1 of other runs" in tuesday and "UT*****26" in tuesday
    for text in (monday, tuesday, *((out / RUNS).glob("*.json"))):
        assert NUMBER not in (text if isinstance(text, str) else text.read_text("utf-8"))

    queue = build_queue(out, latest["run_id"], thumbnails=False)
    assert {(i.source_path, i.reason) for i in queue.open_items} == {("eriksson.jpg", CONFLICT_REASON),
                                                                     ("larsson.jpg", CONFLICT_REASON)}
    (larsson,) = [i for i in queue.items if i.source_path == "larsson.jpg"]
    assert larsson.fields["name"].value == "LARSSON EVA" and larsson.fields["id_number"].value == NUMBER
    page = page_path(out, latest["run_id"]).read_text("utf-8")  # the run's own page, written by the run
    assert page.count(f'data-reason="{CONFLICT_REASON}"') == 2
    assert "eriksson.jpg" in page and "larsson.jpg" in page and "ERIKSSON ANNA MARIA" in page
