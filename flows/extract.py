"""The `extract-folder` Prefect flow: a thin scheduler over the plain stages in `pipeline/`.

The flow schedules and publishes; the documents go through `pipeline.engine.Engine` (in this process, or on Dask
workers), and the flow only writes and counts their outcomes. Discovery is streamed into the engine's bounded
queues, so memory stays flat however large the folder is. One backend instance serves the whole run, so its
in-flight cap and circuit breaker hold across the folder; each of the engine's extractors holds one slot of the
cross-run request limit.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import (
    acreate_link_artifact,
    acreate_markdown_artifact,
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.context import get_run_context
from prefect.runtime import flow_run

from flows.limits import request_slots
from flows.run_lease import leased
from flows.secrets import with_block_key
from pipeline import progress
from pipeline.backends.factory import make_backend
from pipeline.config import Settings
from pipeline.crash_journal import CrashJournal
from pipeline.engine import Engine, Item, Outcome
from pipeline.ingest import Discovery, walk
from pipeline.masking import install_masking, redact
from pipeline.output_lock import hold_output
from pipeline.report import FAILURE_COLUMNS, SAMPLE_COLUMNS, masked_rows, summary_markdown
from pipeline.review.corrections import not_to_read_again
from pipeline.store import FAILURES, RESULTS, RunWriter, read_table, write_run_summary
from pipeline.tally import RunTally


def _run_id() -> str:
    """The flow run's id (a full UUID: run ids name Parquet parts, so they must never collide)."""
    try:
        return str(get_run_context().flow_run.id)
    except Exception:  # outside a flow run (tests calling .fn)
        return str(uuid.uuid4())


ARTIFACT_ROWS = 200  # a UI table, not an export: the Parquet link artifact points at the full data


def _shard_files(shard: str | None) -> list[str] | None:
    """The files a shard manifest lists, or None for a whole folder. Imported here: `flows.sharded` brings
    Prefect's deployment client, which a plain run never uses (0.1-0.2 s of every run's start-up)."""
    if not shard:
        return None
    from flows.sharded import read_shard

    return read_shard(Path(shard))


def _run_name() -> str:
    """`extract <folder> (<n> files)`: the folder's own name, not its full path (paths can hold names), its
    document numbers masked (the run name prefixes every log line)."""
    params = flow_run.parameters
    root = Path(params["input_dir"])
    listed = _shard_files(params.get("shard"))
    out = Path(params["out_dir"]).resolve()
    files = len(listed) if listed is not None else sum(1 for _ in walk(root.resolve(), out))
    return redact(f"extract {root.name} ({files} files)")


@flow(name="extract-folder", flow_run_name=_run_name, log_prints=False)
@leased
async def extract_folder(input_dir: str, out_dir: str, backend: str = "ocr", concurrency: int | None = None,
                         batch_size: int | None = None, force: bool = False, dask: str | None = None,
                         shard: str | None = None, wait_for_lock: bool = True) -> dict[str, Any]:
    """Extract every document under `input_dir` into Parquet under `out_dir`; returns the run summary.

    `dask` (`tcp://host:8786` or `local:N`) runs the batches on Dask workers (flows/dask_batches.py); `shard`
    is a shard manifest from `extract-sharded` (flows/sharded.py): only the files it lists are processed.
    The run holds OUT's lock (`pipeline.output_lock`) from before it reads what is done until its summary is
    written; another run holding it is waited for (logged), or, with `wait_for_lock=False` (`idflow run`
    without `--wait`), refused with `OutputBusy`. A shard runs under its parent's lock.
    """
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    overrides: dict[str, Any] = {"backend": backend}
    if concurrency:
        overrides["concurrency"] = concurrency
    if batch_size:
        overrides["batch_size"] = batch_size
    settings = await with_block_key(Settings(**overrides))
    root, out = Path(input_dir).resolve(), Path(out_dir)  # absolute: the retry and review find files from any cwd
    run_id, fingerprint = _run_id(), settings.fingerprint()
    writer = RunWriter(out, run_id, fingerprint, settings.flush_every)
    tally = RunTally()
    files = _shard_files(shard)
    expected = len(files) if files is not None else sum(1 for _ in walk(root, out.resolve()))
    progress_bar = Progress(await acreate_progress_artifact(0.0, description="documents finished"), expected)
    lock = nullcontext() if shard else hold_output(out, run_id=run_id, wait=wait_for_lock, on_wait=logger.warning)

    async with lock:
        done = frozenset() if force else not_to_read_again(out, fingerprint)

        def discovered() -> Iterator[Item]:
            for item in Discovery(root, done, only=files, settings=settings.prepare, skip_dir=out.resolve()).items():
                tally.seen += 1
                yield item

        try:
            with CrashJournal.open(out, run_id) as journal:
                if journal.suspects:
                    logger.warning("%d page(s) a run that died was preparing: each is prepared alone in a child "
                                   "process", len(journal.suspects))
                async for outcome, worker in _outcomes(discovered(), settings, dask=dask, overrides=overrides,
                                                       fingerprint=fingerprint, journal=journal):
                    writer.add(outcome, worker=worker)
                    tally.add(outcome)
                    await progress_bar.update(tally.finished, tally.seen)
        finally:
            writer.flush()
        for failure in writer.demoted:
            tally.demote(failure)

        summary = tally.summary(run_id=run_id, settings=settings)
        summary["input_dir"], summary["out_dir"] = str(root), str(out)
        write_run_summary(out, summary)
    await progress_bar.finish()
    await _publish(summary, input_dir=str(root), out_dir=str(out))
    logger.info("run %s: seen=%d results=%d failures=%d skipped=%d accounted=%s", run_id, summary["seen"],
                summary["results"], summary["failures"], summary["skipped"], summary["accounted"])
    return summary


async def _outcomes(items: Iterator[Item], settings: Settings, *, dask: str | None, overrides: dict[str, Any],
                    fingerprint: str, journal: CrashJournal) -> AsyncIterator[tuple[Outcome, str]]:
    """Every item's outcome with the worker that made it: the engine in this process (preparing pages under
    `journal`), or Dask workers running the same engine on batches (imported only then: the default path never
    loads Dask; a worker's process is its own, so a page that kills one is Dask's to reschedule)."""
    if dask:
        from flows.dask_batches import DaskBatches

        with DaskBatches(dask, overrides, fingerprint=fingerprint, batch_size=settings.batch_size) as remote:
            async for pair in remote.run(items):
                yield pair
        return
    engine = Engine(settings, make_backend(settings), request_slot=lambda: request_slots(settings.backend, 1),
                    journal=journal)
    async with engine:
        async for outcome in engine.run(items):
            yield outcome, "local"


class Progress:
    """The run's progress: every document to the CLI's bar, and to the Prefect progress artifact at most every
    `every_s` seconds (one API call per document would cost more than a document at 80 documents/s)."""

    def __init__(self, artifact_id: Any, expected: int, every_s: float = 2.0) -> None:
        self.artifact_id, self.expected, self.every_s = artifact_id, expected, every_s
        self._last = 0.0

    async def update(self, finished: int, seen: int) -> None:
        progress.report(finished, max(seen, self.expected))
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            await aupdate_progress_artifact(self.artifact_id, min(99.0, 100.0 * finished / max(self.expected, 1)))

    async def finish(self) -> None:
        await aupdate_progress_artifact(self.artifact_id, 100.0)


async def _publish(summary: dict[str, Any], *, input_dir: str, out_dir: str) -> None:
    """Artifacts for the Prefect UI: summary, masked tables of failures and a sample of results, link."""
    await acreate_markdown_artifact(summary_markdown(summary, input_dir=input_dir, out_dir=out_dir),
                                    key="idflow-run-summary", description="idflow run summary")
    for name, columns, key in ((FAILURES, FAILURE_COLUMNS, "idflow-failures"),
                               (RESULTS, SAMPLE_COLUMNS, "idflow-results")):
        needed = [*columns, "expiry_long_term"] if name == RESULTS else list(columns)  # long-term shown as such
        table = read_table(Path(out_dir), name, needed, run_id=summary["run_id"])
        rows = table.slice(0, ARTIFACT_ROWS).to_pylist() if table is not None else []
        if rows:
            await acreate_table_artifact(masked_rows(rows, columns, ARTIFACT_ROWS), key=key,
                                         description=f"{name} of this run (ID numbers masked)")
    await acreate_link_artifact(Path(out_dir).resolve().as_uri(), link_text="Parquet outputs",
                                key="idflow-outputs")
    from flows.review import publish_review  # the review page (inside OUT) and its summary/link artifacts

    await publish_review(Path(out_dir), summary["run_id"])
