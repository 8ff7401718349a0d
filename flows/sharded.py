"""The `extract-sharded` flow: one large folder split into shards, each a child run of the extract deployment.

Why shards as child flow runs (`run_deployment`) rather than tasks: each shard then runs wherever a Prefect
worker of the pool picks it up, on any machine, in its own process; the UI shows one child run per shard with
its own artifacts, and a shard that fails is rerun alone.

What crosses the boundary is a shard manifest under `OUT/shards/<run_id>/` (relative paths, never bytes), so
input and output folders must be shared storage, mounted at the same path on every worker machine.

Why the parent runs discovery itself: content duplicates and already-done documents are decided once, over the
whole folder, before splitting. A shard never holds two copies of the same content and two shards never hold
the same content, so no document is extracted twice, however the shards are spread. The parent counts what it
skips; each shard counts the rest; `seen == results + failures + skipped` is checked over the sum.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path, PurePosixPath
from typing import Any
from uuid import UUID

import httpx
from prefect import flow, get_client, get_run_logger
from prefect.artifacts import acreate_markdown_artifact, acreate_table_artifact
from prefect.client.schemas.objects import FlowRun
from prefect.context import get_run_context
from prefect.deployments import run_deployment
from prefect.exceptions import PrefectHTTPStatusError

from pipeline.datamodel import Skipped
from pipeline.ingest.discover import Discovery
from pipeline.masking import install_masking
from pipeline.run.report import summary_markdown
from pipeline.run.session import Done, RunSession
from pipeline.run.tally import RunTally
from pipeline.settings import Settings
from pipeline.store.atomic import write_json_atomic
from pipeline.store.parquet import RESULTS, RUNS, read_table

SHARDS = "shards"
EXTRACT_DEPLOYMENT = "extract-folder/shard"
_ADDITIVE = ("seen", "results", "failures", "skipped", "visual_tokens", "prompt_tokens", "completion_tokens",
             "estimated_cost")


@dataclass
class Shard:
    index: int
    files: list[str]
    items: int  # discovery items (pages, skips, ingest failures) the child must account for
    manifest: Path | None = None
    child_runs: list[str] = field(default_factory=list)  # every child run launched for it, oldest first


def write_shard(out: Path, run_id: str, input_dir: Path, shard: Shard) -> Path:
    """Write the shard manifest atomically, so a worker never reads half of one."""
    return write_json_atomic(out / SHARDS / run_id / f"shard-{shard.index:05d}.json",
                             {"input_dir": str(input_dir), "files": shard.files, "items": shard.items})


def read_shard(manifest: Path) -> list[str]:
    """The relative paths of a shard; a path that would leave the input folder is refused."""
    files = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    for rel in files:
        parts = PurePosixPath(rel)
        if parts.is_absolute() or ".." in parts.parts:
            raise ValueError(f"shard {manifest} lists {rel!r}, which is not inside the input folder")
    return files


def plan_shards(root: Path, done: Collection[str], size: int, tally: RunTally,
                skip_dir: Path | None = None) -> Iterator[Shard]:
    """Walk and hash the folder once; yield shards of at most `size` files as they fill.

    Files whose every item is a skip (content seen earlier in the folder, already done, hidden, marker,
    upload in progress) are counted in `tally` here and never sent; any file with a page to do or an ingest
    failure to record goes to a shard, whose child rediscovers it and accounts for all its items. `skip_dir`
    (OUT inside the input folder) is not input."""
    discovery = Discovery(root, done, skip_dir=skip_dir)
    files: list[str] = []
    items = index = 0
    for rel, group in groupby(discovery.items(), key=lambda item: item.rel_path):
        found = list(group)
        if all(isinstance(item, Skipped) for item in found):
            for item in found:
                tally.seen += 1
                tally.add(item)
            continue
        files.append(rel)
        items += len(found)
        if len(files) >= size:
            index += 1
            yield Shard(index, files, items)
            files, items = [], 0
    if files:
        yield Shard(index + 1, files, items)


@dataclass
class ShardOutcome:
    shard: Shard
    attempts: int = 0
    summary: dict[str, Any] | None = None
    errors: list[str] = field(default_factory=list)


async def run_shard(shard: Shard, launch: Callable[[Shard], Awaitable[dict[str, Any]]],
                    attempts: int) -> ShardOutcome:
    """Run one shard, again and again up to `attempts` times, until its child accounts for every item.

    A rerun is cheap and safe: the child skips what an earlier attempt already wrote (same fingerprint)."""
    outcome = ShardOutcome(shard)
    while outcome.attempts < attempts:
        outcome.attempts += 1
        try:
            summary = await launch(shard)
        except Exception as exc:  # a crashed or cancelled child run: this shard is retried, not the others
            outcome.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            continue
        if summary["accounted"] and summary["seen"] == shard.items:
            outcome.summary = summary
            return outcome
        outcome.errors.append(f"child accounted for {summary['seen']} of {shard.items} items")
    return outcome


def child_summary(out: Path, run: FlowRun) -> dict[str, Any]:
    """The summary a finished child run wrote, which stands whatever state the run ended in: a child writes it
    once every document is in Parquet, so a run that failed after it (publishing its artifacts, say) has done
    its shard. A child that wrote none is what the shard is tried again for."""
    path = out / RUNS / f"{run.id}.json"
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    raise RuntimeError(f"child run {run.name} ended {_state(run)} without writing its summary")


def _state(run: FlowRun) -> str:
    return run.state.type.value if run.state else "unknown"


def credit_earlier_attempts(out: Path, outcome: ShardOutcome) -> dict[str, Any]:
    """The shard's last summary with what its earlier, unfinished attempts stored counted as this run's results.

    The last attempt skips those documents as already done (they are in Parquet, with the earlier child's run
    id), yet this run extracted them: without the credit the run's results would be fewer than the rows it
    wrote. At most as many as the last attempt skipped as already done are credited: with `force` it reads them
    again, and the earlier rows are then superseded copies, not more results. Decision counts cover the last
    attempt's records only."""
    summary = outcome.summary
    assert summary is not None
    skipped_by_reason = Counter(summary["skipped_by_reason"])
    earlier = min(sum(_rows(out, run_id) for run_id in outcome.shard.child_runs[:-1]),
                  skipped_by_reason["already_done"])
    if not earlier:
        return summary
    skipped_by_reason["already_done"] -= earlier
    return {**summary, "results": summary["results"] + earlier, "skipped": summary["skipped"] - earlier,
            "skipped_by_reason": dict(+skipped_by_reason)}


def _rows(out: Path, run_id: str) -> int:
    table = read_table(out, RESULTS, ["run_id"], run_id=run_id)
    return 0 if table is None else table.num_rows


def merge_summaries(own: dict[str, Any], outcomes: Sequence[ShardOutcome]) -> dict[str, Any]:
    """The parent's skips plus every shard's counts. Percentiles do not add up across shards, so they are left
    to the shards' own summaries; a shard that never finished leaves the run unaccounted."""
    merged = {**own, "latency_ms_p50": None, "latency_ms_p95": None}
    skipped_by_reason, failures_by_reason = Counter(own["skipped_by_reason"]), Counter(own["failures_by_reason"])
    for outcome in outcomes:
        if outcome.summary is None:
            continue
        for key in _ADDITIVE:
            merged[key] += outcome.summary[key]
        skipped_by_reason.update(outcome.summary["skipped_by_reason"])
        failures_by_reason.update(outcome.summary["failures_by_reason"])
    merged["skipped_by_reason"], merged["failures_by_reason"] = dict(skipped_by_reason), dict(failures_by_reason)
    merged["decisions"] = merge_decisions(own["decisions"], [o.summary.get("decisions") for o in outcomes
                                                             if o.summary is not None])
    merged["estimated_cost"] = round(merged["estimated_cost"], 6)
    merged["shards"] = len(outcomes)
    merged["shard_attempts"] = sum(o.attempts for o in outcomes)
    merged["shards_failed"] = sum(1 for o in outcomes if o.summary is None)
    merged["accounted"] = (merged["shards_failed"] == 0
                           and merged["seen"] == merged["results"] + merged["failures"] + merged["skipped"])
    if merged["elapsed_s"]:
        merged["docs_per_s"] = round((merged["results"] + merged["failures"]) / merged["elapsed_s"], 3)
    return merged


def merge_decisions(own: dict[str, Any], shards: Sequence[dict[str, Any] | None]) -> dict[str, Any]:
    """The parent's decision counts (its failures) plus every shard's (a shard's summary written by an older idflow
    has none: its records are then in no count)."""
    merged, issuers = dict(own), Counter(own["by_issuer"])
    for counts in filter(None, shards):
        for key in ("auto_accepted", "to_review", "failed", "expired", "expiry_unknown"):
            merged[key] += counts.get(key, 0)
        issuers.update(counts.get("by_issuer", {}))
    merged["by_issuer"] = dict(issuers.most_common())
    return merged


async def finished_run(run_id: UUID, poll_interval: float, patience_s: float = 600.0) -> FlowRun:
    """The child run once it is in a final state, read from the server every `poll_interval` seconds (as
    `run_deployment` waits, which gives no run id when its wait is cut short).

    A server that does not answer (after the client's own retries) is asked again until it has not answered for
    `patience_s` seconds, then the error is raised: giving up at once would launch the shard again while its
    child may still be running, and the two would read the same documents."""
    async with get_client() as client:
        silent_since: float | None = None
        while True:
            try:
                run = await client.read_flow_run(run_id)
            except (httpx.TransportError, PrefectHTTPStatusError) as exc:
                if isinstance(exc, PrefectHTTPStatusError) and exc.response.status_code < 500:
                    raise
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > patience_s:
                    raise
            else:
                silent_since = None
                if run.state is not None and run.state.is_final():
                    return run
            await asyncio.sleep(poll_interval)


@flow(name="extract-sharded", flow_run_name="sharded {input_dir}", log_prints=False)
async def extract_sharded(input_dir: str, out_dir: str, backend: str = "ocr", shard_size: int | None = None,
                          parallel_shards: int = 8, attempts: int = 3, force: bool = False,
                          deployment: str = EXTRACT_DEPLOYMENT, poll_interval: float = 5.0) -> dict[str, Any]:
    """Extract `input_dir` as shards of `shard_size` files (default IDFLOW_SHARD_SIZE), each a child run of
    `deployment` on whichever pool worker is free; at most `parallel_shards` shards are queued or running."""
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    settings = Settings(backend=backend)
    root, out = Path(input_dir).resolve(), Path(out_dir).resolve()  # children run in other processes
    run_id = str(get_run_context().flow_run.id)
    size = shard_size or settings.schedule.shard_size

    async def launch(shard: Shard) -> dict[str, Any]:
        run = await run_deployment(deployment, timeout=0, parameters={
            "input_dir": str(root), "out_dir": str(out), "backend": backend, "shard": str(shard.manifest),
            "force": force})
        shard.child_runs.append(str(run.id))  # before waiting: its rows count even if the wait is cut short
        run = await finished_run(run.id, poll_interval)
        summary = child_summary(out, run)
        if run.state is None or not run.state.is_completed():
            logger.warning("shard %d: child run %s ended %s after writing its summary; its accounting stands",
                           shard.index, run.name, _state(run))
        return summary

    slots = asyncio.Semaphore(max(1, parallel_shards))
    running: list[asyncio.Task[ShardOutcome]] = []

    async def one(shard: Shard) -> ShardOutcome:
        try:
            outcome = await run_shard(shard, launch, attempts)
        finally:
            slots.release()
        if outcome.summary is None:
            logger.error("shard %d failed %d times: %s", shard.index, outcome.attempts, "; ".join(outcome.errors))
        return outcome

    # OUT's lock, held for the children too: they run under it (flows/extract.py takes none for a shard).
    async with RunSession.open(out, run_id=run_id, settings=settings, done=Done.NOTHING if force else
                               Done.SAME_SETTINGS, on_wait=logger.warning, journal=False) as run:
        plan = plan_shards(root, run.done, size, run.tally, skip_dir=out.resolve())
        while True:  # plan as shards are taken: workers start on shard 1 while the walk is still hashing
            await slots.acquire()
            shard = await asyncio.to_thread(next, plan, None)
            if shard is None:
                slots.release()
                break
            shard.manifest = write_shard(out, run_id, root, shard)
            running.append(asyncio.create_task(one(shard)))
        outcomes = await asyncio.gather(*running)
        for outcome in outcomes:
            if outcome.summary is not None:
                outcome.summary = credit_earlier_attempts(out, outcome)
        run.conflict_runs = {o.summary["run_id"] for o in outcomes if o.summary is not None}
        run.summary_extra.update(input_dir=str(root), out_dir=str(out))
        run.summarize = lambda own: merge_summaries(own, outcomes)
    summary = run.summary
    assert summary is not None
    await acreate_markdown_artifact(summary_markdown(summary, input_dir=str(root), out_dir=str(out)),
                                    key="idflow-sharded-summary", description="idflow sharded run summary")
    await acreate_table_artifact([{"shard": o.shard.index, "files": len(o.shard.files), "attempts": o.attempts,
                                   "child_run": o.summary["run_id"] if o.summary else None,
                                   "outcome": "done" if o.summary else "; ".join(o.errors)[:200]}
                                  for o in outcomes], key="idflow-shards", description="shards of this run")
    logger.info("sharded run %s: %d shards (%d failed) seen=%d results=%d failures=%d skipped=%d accounted=%s",
                run_id, summary["shards"], summary["shards_failed"], summary["seen"], summary["results"],
                summary["failures"], summary["skipped"], summary["accounted"])
    if summary["shards_failed"]:
        raise RuntimeError(f"{summary['shards_failed']} of {summary['shards']} shards failed after {attempts} "
                           "attempts; rerun the flow: done documents are skipped")
    return summary
