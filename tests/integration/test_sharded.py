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

import pytest

from flows.sharded import Shard, plan_shards, read_shard, run_shard, write_shard
from pipeline.ingest.discover import Discovery
from pipeline.run.tally import RunTally
from pipeline.store.parquet import FAILURES, RESULTS, read_table
from synth.sample_set import build_eval
from tests.support.mistake_server import truth_model
from tests.support.prefect_server import BIN, REPO, Stack, prefect_server

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
    assert len({r["run_id"] for r in results + failures}) == summary["shards"]  # each shard wrote its own parts

    runs = pool.call(_shard_runs)
    assert len(runs) == summary["shards"] and all(r.state.is_completed() for r in runs)
    logs = {name: (pool.tmp / f"{name}.log").read_text(errors="replace") for name in ("worker-1", "worker-2")}
    ran_on = {name for name, log in logs.items() for r in runs if str(r.id) in log}
    assert ran_on == {"worker-1", "worker-2"}, "both pool workers should have run shards"

    again = _sharded(pool, folder, out)  # idempotent across shards: only failed documents are tried again
    assert again["accounted"] and again["results"] == 0 and again["seen"] == items
    assert again["skipped_by_reason"]["already_done"] == len(results)
    assert again["failures"] == summary["failures"]


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
