"""Sharded fan-out: the planning and retry logic on their own, then end to end under a real `prefect server`
on loopback with a process work pool and two `prefect worker` processes running the shards.

The end-to-end test reads the pages through a loopback model answering from the generated set's truth: its
subject is the fan-out (shards, pool workers, accounting, reruns), the same for every backend; the embedded reader
loading in every shard's process and reading each page took most of its time. It is still slow (server start, a
subprocess per shard); every process is killed in `finally`.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

from flows.sharded import (
    Shard,
    ShardOutcome,
    child_summary,
    credit_earlier_attempts,
    plan_shards,
    read_shard,
    run_shard,
    write_shard,
)
from pipeline.datamodel import Skipped, SkipReason
from pipeline.ingest.discover import Discovery
from pipeline.run.session import Done, RunSession
from pipeline.run.tally import RunTally
from pipeline.settings import Settings
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from synth.sample_set import build_eval
from tests.support.mistake_server import truth_model
from tests.support.prefect_server import BIN, REPO, Stack, prefect_server
from tests.support.records import passport_record

POOL = "idflow-shards"
KEY = "sk-sharded-61fa2c"


def test_plan_puts_each_file_in_one_shard_and_counts_the_rest(sample_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    shutil.copytree(sample_dir, folder)
    shutil.copy(folder / "cn_front.jpg", folder / "zz_copy_of_cn_front.jpg")  # same content, last in the walk
    tally = RunTally()
    shards = list(plan_shards(folder, frozenset(), 3, tally))
    files = [f for s in shards for f in s.files]
    assert len(files) == len(set(files)) and all(len(s.files) <= 3 for s in shards)
    assert "zz_copy_of_cn_front.jpg" not in files and "notes.tmp" not in files
    assert tally.skipped_by_reason["duplicate_content"] == 1
    assert tally.seen + sum(s.items for s in shards) == sum(1 for _ in Discovery(folder).items())
    manifest = write_shard(tmp_path / "out", "run1", folder, shards[0])
    assert read_shard(manifest) == shards[0].files
    # OUT inside the input folder is not input (without skip_dir its Parquet part would be one more file to do)
    (folder / "out" / "results").mkdir(parents=True)
    (folder / "out" / "results" / "part-1.parquet").write_bytes(b"PAR1 written by an earlier run")
    again = [f for s in plan_shards(folder, frozenset(), 3, RunTally(), skip_dir=(folder / "out").resolve())
             for f in s.files]
    assert sorted(again) == sorted(files)
    assert "out/results/part-1.parquet" in [f for s in plan_shards(folder, frozenset(), 3, RunTally()) for f in s.files]


def test_a_failed_shard_is_retried_alone() -> None:
    launched: list[int] = []

    async def launch(shard: Shard) -> dict[str, Any]:
        launched.append(shard.index)
        if shard.index == 2 and launched.count(2) == 1:
            raise RuntimeError("child run crashed")
        return {"accounted": True, "seen": shard.items}

    async def main() -> list:
        return await asyncio.gather(*(run_shard(Shard(i, [f"{i}.jpg"], 1), launch, 3) for i in (1, 2, 3)))

    outcomes = asyncio.run(main())
    assert sorted(launched) == [1, 2, 2, 3]
    assert [o.attempts for o in outcomes] == [1, 2, 1] and all(o.summary for o in outcomes)


def test_a_child_that_wrote_its_summary_has_done_its_shard_whatever_state_it_ended_in(tmp_path: Path) -> None:
    """A child fails after its summary (publishing artifacts, say): its documents are in Parquet and counted, so
    the shard is not tried again (a second child would find them done and count them as skipped). A child that
    wrote none is tried again, and the error names the state it ended in."""
    from prefect.client.schemas.objects import FlowRun
    from prefect.states import Completed, Failed

    child = uuid4()

    async def finished() -> dict[str, Any] | None:
        async with RunSession.open(tmp_path, run_id=str(child), settings=Settings()) as run:
            run.see()
            run.record(passport_record(1))
        return run.summary

    written = asyncio.run(finished())
    failed = FlowRun(id=child, flow_id=uuid4(), name="shard-1", state=Failed(message="artifact refused"))
    assert child_summary(tmp_path, failed) == written and written["results"] == 1
    with pytest.raises(RuntimeError, match="shard-2 ended FAILED without writing its summary"):
        child_summary(tmp_path, FlowRun(flow_id=uuid4(), name="shard-2", state=Failed()))
    with pytest.raises(RuntimeError, match="ended COMPLETED without"):
        child_summary(tmp_path, FlowRun(flow_id=uuid4(), name="shard-3", state=Completed()))


def test_what_an_unfinished_attempt_stored_counts_as_the_runs_results(tmp_path: Path) -> None:
    """The first child stores one of its shard's two pages and dies before its summary; the second skips that
    page as already done and reads the other. The run extracted both: two results, no skip, as many as the rows
    it wrote."""
    async def attempt(run_id: str, done: Done = Done.SAME_SETTINGS) -> dict[str, Any] | None:
        async with RunSession.open(tmp_path, run_id=run_id, settings=Settings(), done=done) as run:
            for i in (1, 2):
                run.see()
                if f"{i:064d}:0" in run.done:
                    run.record(Skipped(f"{i}.png", SkipReason.ALREADY_DONE))
                    continue
                run.record(passport_record(i))
                if run_id == "child-1":
                    raise RuntimeError("worker killed")
        return run.summary

    with pytest.raises(RuntimeError, match="killed"):
        asyncio.run(attempt("child-1"))
    last = asyncio.run(attempt("child-2"))
    assert last is not None and (last["results"], last["skipped"]) == (1, 1)
    shard = Shard(1, ["1.png", "2.png"], 2, child_runs=["child-1", "child-2"])
    credited = credit_earlier_attempts(tmp_path, ShardOutcome(shard, attempts=2, summary=last))
    assert (credited["results"], credited["skipped"], credited["skipped_by_reason"]) == (2, 0, {})
    assert credited["results"] == read_table(tmp_path, RESULTS).num_rows
    once = Shard(2, ["2.png"], 1, child_runs=["child-2"])  # a shard done at its first attempt is left as it is
    assert credit_earlier_attempts(tmp_path, ShardOutcome(once, attempts=1, summary=last)) == last
    # with `force` a last attempt reads both pages again: the earlier rows are superseded copies, not more results
    forced = asyncio.run(attempt("child-3", Done.NOTHING))
    assert forced is not None and (forced["results"], forced["skipped"]) == (2, 0)
    again = Shard(1, ["1.png", "2.png"], 2, child_runs=["child-1", "child-2", "child-3"])
    assert credit_earlier_attempts(tmp_path, ShardOutcome(again, attempts=3, summary=forced)) == forced


SHARD_DEPLOYMENT_YAML = """\
name: idflow-shards-test
prefect-version: 3.9.1
pull:
  - prefect.deployments.steps.set_working_directory:
      directory: "{repo}"
deployments:
  - name: shard
    description: One shard of an extract-sharded run (a shard manifest under OUT/shards/).
    entrypoint: flows/extract.py:extract_folder
    tags: ["idflow", "shard"]
    work_pool: {{name: {pool}}}
"""


@pytest.fixture(scope="module")
def documents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated set with a duplicate in a later shard; its manifest (the truth) beside the folder."""
    folder = tmp_path_factory.mktemp("sharded-docs") / "in"
    build_eval(folder, 8, 7)
    (folder / "manifest.json").rename(folder.parent / "manifest.json")
    shutil.copy(folder / "e0001_td2_blur.jpg", folder / "zz_copy.jpg")
    return folder


@pytest.fixture(scope="module")
def model(documents: Path) -> Iterator[dict[str, str]]:
    """The model endpoint, in this process's environment (the parent run's settings must be the shards')."""
    with truth_model(documents.parent / "manifest.json", KEY, root=documents) as env, \
            pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        yield env


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, model: dict[str, str]) -> Iterator[Stack]:
    """Server, a process work pool, the `extract-folder/shard` deployment and two workers (one run each), the
    workers' shard runs reading through `model`."""
    tmp = tmp_path_factory.mktemp("sharded")
    with prefect_server(tmp) as stack:
        stack.env.update(model, PREFECT_WORKER_QUERY_SECONDS="2")
        prefect_file = tmp / "prefect.yaml"
        prefect_file.write_text(SHARD_DEPLOYMENT_YAML.format(repo=REPO, pool=POOL))
        for cmd in ([str(BIN / "prefect"), "work-pool", "create", POOL, "--type", "process"],
                    [str(BIN / "prefect"), "--no-prompt", "deploy", "--name", "shard", "--prefect-file",
                     str(prefect_file)]):
            done = subprocess.run(cmd, env=stack.env, cwd=REPO, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        for name in ("worker-1", "worker-2"):
            stack.start(name, str(BIN / "prefect"), "worker", "start", "--pool", POOL, "--name", name,
                        "--limit", "1")
        yield stack


def _sharded(stack: Stack, folder: Path, out: Path) -> dict[str, Any]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.sharded import extract_sharded

    with temporary_settings({PREFECT_API_URL: stack.api}):
        return asyncio.run(extract_sharded(str(folder), str(out), backend="openai", shard_size=4,
                                           parallel_shards=4, poll_interval=2))


@pytest.mark.timeout(1200)
def test_shards_run_on_two_pool_workers_accounted_without_duplicates(pool: Stack, documents: Path,
                                                                    tmp_path: Path) -> None:
    folder = documents
    out = tmp_path / "out"
    items = sum(1 for _ in Discovery(folder).items())

    summary = _sharded(pool, folder, out)
    assert summary["accounted"] and summary["shards_failed"] == 0 and summary["shards"] >= 3
    assert summary["seen"] == items
    assert summary["skipped_by_reason"]["duplicate_content"] == 1
    results, failures = read_table(out, RESULTS).to_pylist(), read_table(out, FAILURES).to_pylist()
    assert (len(results), len(failures)) == (summary["results"], summary["failures"])
    keys = [(r["sha256"], r["page"]) for r in results]
    assert len(keys) == len(set(keys)), "a document was extracted twice"
    runs = pool.call(_shard_runs)  # a shard tried again has a child run for each attempt, each its own parts
    assert len(runs) == summary["shard_attempts"] >= summary["shards"]
    assert {r["run_id"] for r in results + failures} <= {str(r.id) for r in runs}
    logs = {name: (pool.tmp / f"{name}.log").read_text(errors="replace") for name in ("worker-1", "worker-2")}
    ran_on = {name for name, log in logs.items() for r in runs if str(r.id) in log}
    assert ran_on == {"worker-1", "worker-2"}, "both pool workers should have run shards"

    again = _sharded(pool, folder, out)  # idempotent across shards: only failed documents are tried again
    assert again["accounted"] and again["results"] == 0 and again["seen"] == items
    assert again["skipped_by_reason"]["already_done"] == len(results)
    assert again["failures"] == summary["failures"]


class CuttableProxy:
    """A loopback TCP proxy to the Prefect server that can be cut: while cut, it drops every connection it has
    and closes each new one unanswered (the client sees the server disconnect), as a network outage would."""

    def __init__(self, port: int) -> None:
        self.port, self.cut, self.forwarded, self.dropped = port, False, 0, 0
        self.dropped_enough, self.passed = asyncio.Event(), asyncio.Event()
        self._open: set[asyncio.StreamWriter] = set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/api"

    def cut_off(self) -> None:
        self.cut = True
        for writer in list(self._open):
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.cut:
            self.dropped += 1
            if self.dropped >= 3:
                self.dropped_enough.set()
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._open |= {writer, up_writer}
        self.forwarded += 1
        self.passed.set()

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()
                self._open.discard(dst)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


def test_the_wait_for_a_child_run_outlasts_an_outage_and_gives_up_after_its_patience(pool: Stack) -> None:
    """The parent waits on a child run through a server it cannot reach for a while (launching the shard again
    would have two children read the same documents), and raises once the outage outlasts its patience."""
    import httpx
    from prefect import flow
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, PREFECT_CLIENT_MAX_RETRIES, temporary_settings
    from prefect.states import Completed, Pending

    from flows.sharded import finished_run

    @flow(name="shard-wait-target")
    def target() -> None:
        pass

    async def main() -> tuple[Any, type[BaseException] | None]:
        proxy = CuttableProxy(int(pool.url.rsplit(":", 1)[1]))
        through = await proxy.start()
        with temporary_settings({PREFECT_API_URL: pool.api}):
            async with get_client() as direct:
                run = await direct.create_flow_run(target, state=Pending())
                with temporary_settings({PREFECT_API_URL: through, PREFECT_CLIENT_MAX_RETRIES: 0}):
                    waiting = asyncio.create_task(finished_run(run.id, 0.05, patience_s=120))
                    await asyncio.wait_for(proxy.passed.wait(), 60)  # it asked the server through the proxy
                    proxy.cut_off()
                    refused = asyncio.ensure_future(proxy.dropped_enough.wait())  # and was refused 3 times since
                    await asyncio.wait({refused, waiting}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
                    if waiting.done():
                        waiting.result()  # it stopped waiting during the outage: its error is the failure
                    assert refused.done(), "the wait never asked the server again"
                    await direct.set_flow_run_state(run.id, Completed(), force=True)
                    proxy.cut = False
                    finished = await asyncio.wait_for(waiting, 120)
                    proxy.cut_off()
                    try:
                        await asyncio.wait_for(finished_run(run.id, 0.05, patience_s=0.5), 60)
                        gave_up = None
                    except Exception as exc:  # noqa: BLE001 - the type is what is checked
                        gave_up = type(exc)
        assert proxy.server is not None
        proxy.server.close()
        return finished, gave_up

    finished, gave_up = asyncio.run(main())
    assert finished.state.is_completed()
    assert gave_up is not None and issubclass(gave_up, httpx.TransportError)


async def _shard_runs(client: Any) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    return await client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=["shard"])))


def test_the_parent_counts_its_shards_decisions() -> None:
    """The sharded run's summary adds its shards' decision counts to its own (its failures); a shard whose
    summary has none (an older idflow) adds nothing."""
    from flows.sharded import merge_decisions

    own = {"threshold": 0.95, "auto_accepted": 0, "to_review": 0, "failed": 1, "expired": 0, "expiry_unknown": 0,
           "by_issuer": {}}
    shards = [{"auto_accepted": 2, "to_review": 1, "failed": 0, "expired": 1, "expiry_unknown": 1,
               "by_issuer": {"CHN": 2, "UTO": 1}}, None,
              {"auto_accepted": 1, "to_review": 0, "failed": 2, "expired": 0, "expiry_unknown": 0,
               "by_issuer": {"CHN": 1}}]
    assert merge_decisions(own, shards) == {"threshold": 0.95, "auto_accepted": 3, "to_review": 1, "failed": 3,
                                            "expired": 1, "expiry_unknown": 1, "by_issuer": {"CHN": 3, "UTO": 1}}
