"""The run session: the one place a run takes OUT's lock, reads what is done, stores rows and writes its summary."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from pipeline.datamodel import (
    Failure,
    FieldReading,
    Reason,
    Record,
    Skipped,
    SkipReason,
)
from pipeline.run.session import Done, RunSession
from pipeline.settings import Settings
from pipeline.store.output_lock import OutputBusy
from pipeline.store.parquet import FAILURES, RESULTS, RUNS, read_table
from tests.support.records import passport_record


def _summary(out: Path, run_id: str) -> dict:
    return json.loads((out / RUNS / f"{run_id}.json").read_text(encoding="utf-8"))


def _run(coro):
    return asyncio.run(coro)


def test_a_finished_run_stores_its_rows_and_an_accounted_summary(tmp_path: Path) -> None:
    async def go() -> RunSession:
        async with RunSession.open(tmp_path, run_id="r1", settings=Settings()) as run:
            for outcome in (passport_record(1), passport_record(2), Failure("bad.jpg", None, None, "ingest", Reason.EMPTY_FILE, "0 B"),
                            Skipped(".hidden", SkipReason.HIDDEN)):
                run.see()
                run.record(outcome)
            run.summary_extra["input_dir"] = "/somewhere"
        return run

    run = _run(go())
    stored = _summary(tmp_path, "r1")
    assert stored == {**stored, "seen": 4, "results": 2, "failures": 1, "skipped": 1, "accounted": True,
                      "input_dir": "/somewhere"}
    assert run.summary is not None and run.summary["run_id"] == "r1"
    assert read_table(tmp_path, RESULTS).num_rows == 2 and read_table(tmp_path, FAILURES).num_rows == 1
    assert not (tmp_path / ".inflight").exists() or not any((tmp_path / ".inflight").iterdir())


def test_an_error_keeps_what_was_extracted_and_writes_no_summary(tmp_path: Path) -> None:
    async def go() -> None:
        async with RunSession.open(tmp_path, run_id="r1", settings=Settings()) as run:
            run.see(2)
            run.record(passport_record(1))
            raise RuntimeError("the endpoint went away")

    with pytest.raises(RuntimeError, match="went away"):
        _run(go())
    assert read_table(tmp_path, RESULTS).num_rows == 1  # flushed on the way out
    assert not (tmp_path / RUNS).exists()

    async def again() -> None:  # and the lock was let go
        async with RunSession.open(tmp_path, run_id="r2", settings=Settings(), wait=False):
            pass

    _run(again())
    assert _summary(tmp_path, "r2")["seen"] == 0


def test_a_second_session_on_the_same_output_is_refused_or_waits(tmp_path: Path) -> None:
    async def go() -> tuple[str, list[str]]:
        waited: list[str] = []
        told = asyncio.Event()

        def on_wait(message: str) -> None:
            waited.append(message)
            told.set()

        async with RunSession.open(tmp_path, run_id="first", settings=Settings()):
            with pytest.raises(OutputBusy, match="first"):
                async with RunSession.open(tmp_path, run_id="second", settings=Settings(), wait=False):
                    pass
            holder_done = asyncio.Event()

            async def waiter() -> str:
                async with RunSession.open(tmp_path, run_id="third", settings=Settings(), wait=True,
                                           on_wait=on_wait) as run:
                    assert holder_done.is_set()  # it got OUT only once the first let go
                    return run.run_id

            task = asyncio.create_task(waiter())
            await told.wait()
            holder_done.set()
        return await task, waited

    third, waited = _run(go())
    assert third == "third" and "first" in waited[0]


def test_what_is_done_depends_on_the_run_kind(tmp_path: Path) -> None:
    settings = Settings()

    async def store() -> None:
        async with RunSession.open(tmp_path, run_id="r1", settings=settings) as run:
            run.see()
            run.record(passport_record(7))

    async def done(**kw) -> frozenset[str]:
        async with RunSession.open(tmp_path, run_id="probe", **kw) as run:
            run.write_summary = False
            return run.done

    _run(store())
    key = f"{7:064d}:0"
    assert _run(done(settings=settings)) == {key}
    other = Settings(prepare={"max_pixels": 500_000})  # another fingerprint: its results are not this run's
    assert _run(done(settings=other)) == frozenset()
    assert _run(done(settings=other, done=Done.ANY_RESULT)) == {key}
    assert _run(done(settings=settings, done=Done.NOTHING)) == frozenset()
    assert not (tmp_path / RUNS / "probe.json").exists()  # write_summary=False


def test_a_result_the_writer_cannot_store_is_counted_as_a_failure_once(tmp_path: Path) -> None:
    async def go() -> RunSession:
        async with RunSession.open(tmp_path, run_id="r1", settings=Settings()) as run:
            run.see(2)
            run.record(passport_record(1))
            run.record(dataclasses.replace(passport_record(2), expiry_date="14/01/2023"))  # no row can be built
            assert [f.sha256 for f in run.flush()] == [f"{2:064d}"]
            run.flush()  # again: nothing counted twice
        return run

    run = _run(go())
    assert run.summary is not None
    assert (run.summary["results"], run.summary["failures"], run.summary["accounted"]) == (1, 1, True)
    assert run.summary["failures_by_reason"] == {"internal_error": 1}


def test_summarize_turns_the_tally_into_the_stored_summary(tmp_path: Path) -> None:
    async def go() -> None:
        async with RunSession.open(tmp_path, run_id="parent", settings=Settings(), journal=False) as run:
            run.summarize = lambda own: {**own, "shards": 3}

    _run(go())
    assert _summary(tmp_path, "parent")["shards"] == 3
    assert not (tmp_path / ".inflight").exists()


def test_the_summary_counts_records_whose_number_another_document_shows_with_another_name(tmp_path: Path) -> None:
    """Run r2 reads, on another document, r1's number under another name: the summary counts r2's record and
    the earlier one it flags, and holds the number masked only."""
    async def one_run(run_id: str, records: list[Record]) -> dict:
        async with RunSession.open(tmp_path, run_id=run_id, settings=Settings()) as run:
            for record in records:
                run.see()
                run.record(record)
        assert run.summary is not None
        return run.summary

    assert _run(one_run("r1", [passport_record(1)]))["number_conflicts"] == {"records": 0, "other_records": 0,
                                                                     "numbers": []}
    renamed = passport_record(2)
    renamed.extraction.fields["name"] = "MARTIN SARA"
    assert _run(one_run("r2", [renamed]))["number_conflicts"] == {"records": 1, "other_records": 1,
                                                                  "numbers": ["ZE****09"]}
    assert "ZE000509" not in (tmp_path / RUNS / "r2.json").read_text(encoding="utf-8")


def test_the_summary_counts_what_a_desk_decides_first(tmp_path: Path) -> None:
    """Auto-accepted (every field at the threshold) or to review, as the review page lists them; expired on the
    run's date (unknown without an end date, or for life); by issuer."""
    sure = {name: FieldReading("x", "present", 0.99) for name in ("name", "id_number", "expiry_date")}

    def record(i: int, expiry: str | None, issuer: str | None, *, confident: bool = True) -> Record:
        r = passport_record(i)
        ex = dataclasses.replace(r.extraction, issuer=issuer, field_states=sure if confident else {},
                                 fields={**r.extraction.fields, "id_number": f"ZE00050{i}"})  # no number conflict
        return dataclasses.replace(r, extraction=ex, expiry_date=None if expiry == "long-term" else expiry,
                                   expiry_long_term=expiry == "long-term")

    async def go() -> RunSession:
        async with RunSession.open(tmp_path, run_id="r1", settings=Settings()) as run:
            outcomes = [record(1, "2001-01-01", "UTO"), record(2, "2999-01-01", "CHN"),
                        record(3, "long-term", "CHN"), record(4, None, None, confident=False),
                        Failure("bad.jpg", None, None, "ingest", Reason.EMPTY_FILE, "0 B")]
            for outcome in outcomes:
                run.see()
                run.record(outcome)
        return run

    run = _run(go())
    assert _summary(tmp_path, "r1")["decisions"] == {
        "threshold": 0.95, "auto_accepted": 3, "to_review": 1, "failed": 1, "expired": 1, "expiry_unknown": 2,
        "by_issuer": {"CHN": 2, "UTO": 1, "unknown": 1}}
    rows = {r["source_path"]: (r["expired"], r["issuer"]) for r in read_table(tmp_path, RESULTS).to_pylist()}
    assert rows == {"1.png": (True, "UTO"), "2.png": (False, "CHN"), "3.png": (None, "CHN"), "4.png": (None, None)}
    assert run.summary is not None
