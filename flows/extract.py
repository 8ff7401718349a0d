"""The `extract-folder` Prefect flow: a thin scheduler over the plain stages in `pipeline/`.

The flow schedules and publishes; the documents go through `pipeline.run.engine.Engine` (in this process, or on Dask
workers), and the run's bookkeeping is `pipeline.run.session.RunSession`. Discovery is streamed into the engine's
bounded queues, so memory stays flat however large the folder is. One backend instance serves the whole run, so its
in-flight cap and circuit breaker hold across the folder; each of the engine's extractors holds one slot of the
cross-run request limit. In the Prefect UI a run shows one `process-batch` task run per batch of documents
(`pipeline.run.batches`: batches are assigned over the one stream, so the engine never drains between them).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
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

from flows.batch_tasks import batch_task
from flows.limits import request_slots
from flows.run_lease import leased
from flows.secrets import with_block_key
from flows.sigterm import stops_on_sigterm
from pipeline.extract.factory import make_backend
from pipeline.ingest import sources
from pipeline.ingest.discover import Discovery, walk
from pipeline.masking import install_masking, redact
from pipeline.review.page import PAGE_KEY, owed_page, page_path, write_page
from pipeline.review.queue import MAX_PICTURES, build_queue
from pipeline.review.thumbnails import RunThumbnails
from pipeline.run import progress
from pipeline.run.batches import BatchCounts, BatchRouter, drive_batches
from pipeline.run.engine import Engine, Item, Outcome
from pipeline.run.report import FAILURE_COLUMNS, SAMPLE_COLUMNS, masked_rows, summary_markdown
from pipeline.run.session import Done, OutputWriteError, RunSession, review_stopped_line, storage_problem
from pipeline.settings import Settings, VllmSettings
from pipeline.store.crash_journal import CrashJournal
from pipeline.store.parquet import FAILURES, RESULTS, read_table


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
    out = Path(params["out_dir"]).resolve()
    root = sources.resolve(out, params["input_dir"])
    listed = _shard_files(params.get("shard"))
    files = len(listed) if listed is not None else sum(1 for _ in walk(root.resolve(), out))
    return redact(f"extract {root.name} ({files} files)")


@flow(name="extract-folder", flow_run_name=_run_name, log_prints=False)
@stops_on_sigterm
@leased
async def extract_folder(input_dir: str, out_dir: str, backend: str = "ocr", concurrency: int | None = None,
                         batch_size: int | None = None, force: bool = False, dask: str | None = None,
                         shard: str | None = None, wait_for_lock: bool = True,
                         vllm_fallback: str | None = None) -> dict[str, Any]:
    """Extract every document under `input_dir` into Parquet under `out_dir`; returns the run summary.
    `input_dir` is a folder, or a reference to one kept in OUT (`pipeline.ingest.sources`: the one `idflow run`
    registers, or the lasting one an upload event or a nightly run passes), so the folder's name, which can hold
    an ID number, stays out of the flow run's parameters.

    The documents stream through one engine (or Dask workers, `dask`: `tcp://host:8786` or `local:N`); each
    batch of `batch_size` of them is a task run (`batch-00001`, ...) that stores its documents and reports its
    counts. `shard` is a shard manifest from `extract-sharded` (flows/sharded.py): only the files it lists are
    processed, under the parent's lock. The run holds OUT's lock (`pipeline.run.session`) from before it reads
    what is done until its summary is written; another run holding it is waited for (logged), or, with
    `wait_for_lock=False` (`idflow run` without `--wait`), refused with `OutputBusy`. `vllm_fallback` overrides
    IDFLOW_VLLM_FALLBACK (`none` or `openai`) for this run.
    """
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    overrides: dict[str, Any] = {"backend": backend}
    if concurrency:
        overrides["concurrency"] = concurrency
    if batch_size:
        overrides["batch_size"] = batch_size
    if vllm_fallback:
        overrides["vllm"] = VllmSettings(fallback=vllm_fallback)  # the rest of the pool's settings as read
    settings = await with_block_key(Settings(**overrides))
    out = Path(out_dir)
    root = sources.resolve(out, input_dir).resolve()  # absolute: the retry and review find files from any cwd
    files = _shard_files(shard)
    expected = len(files) if files is not None else sum(1 for _ in walk(root, out.resolve()))
    progress_bar = Progress(await acreate_progress_artifact(0.0, description="documents finished"), expected)

    async with RunSession.open(out, run_id=_run_id(), settings=settings, lock=not shard, wait=wait_for_lock,
                               on_wait=logger.warning, done=Done.NOTHING if force else Done.SAME_SETTINGS) as run:
        if run.journal is not None and run.journal.suspects:
            logger.warning("%d page(s) a run that died was preparing: each is prepared alone in a child process",
                           len(run.journal.suspects))

        def discovered() -> Iterator[Item]:
            for item in Discovery(root, run.done, only=files, settings=settings.prepare,
                                  skip_dir=out.resolve()).items():
                run.see()
                yield item

        def record(outcome: Outcome, worker: str) -> None:
            run.record(outcome, worker=worker)
            progress_bar.report(run.finished, run.tally.seen)

        router = BatchRouter(settings.batch_size, asyncio.get_running_loop())
        made = RunThumbnails(MAX_PICTURES)
        stream = _outcomes(router.assign(discovered()), settings, dask=dask, overrides=overrides,
                           fingerprint=run.writer.fingerprint, journal=run.journal, thumbnails=made)
        counts = await drive_batches(router, stream, lambda batch: batch_task(batch, record, progress_bar.publish),
                                     record)
        run.summary_extra.update(input_dir=str(root), out_dir=str(out),
                                 **{PAGE_KEY: page_path(Path("."), run.run_id).as_posix()})
    summary = run.summary
    assert summary is not None
    await progress_bar.finish()
    await _publish(summary, counts, input_dir=str(root), out_dir=str(out), made=made)
    logger.info("run %s: seen=%d results=%d failures=%d skipped=%d accounted=%s", summary["run_id"],
                summary["seen"], summary["results"], summary["failures"], summary["skipped"], summary["accounted"])
    return summary


async def _outcomes(items: Iterator[Item], settings: Settings, *, dask: str | None, overrides: dict[str, Any],
                    fingerprint: str, journal: CrashJournal | None,
                    thumbnails: RunThumbnails | None = None) -> AsyncIterator[tuple[Outcome, str]]:
    """Every item's outcome with the worker that made it: the engine in this process (preparing pages under
    `journal`, keeping the review page's `thumbnails` of the pages it sent), or Dask workers running the same engine on batches (imported only then: the default path never
    loads Dask; a worker's process is its own, so a page that kills one is Dask's to reschedule)."""
    if dask:
        from flows.dask_batches import DaskBatches

        with DaskBatches(dask, overrides, fingerprint=fingerprint, batch_size=settings.batch_size) as remote:
            async for pair in remote.run(items):
                yield pair
        return
    engine = Engine(settings, make_backend(settings), request_slot=lambda: request_slots(settings.backend, 1),
                    journal=journal, thumbnails=thumbnails)
    async with engine:
        async for outcome in engine.run(items):
            yield outcome, "local"


class Progress:
    """The run's progress: every document to the CLI's bar, and to the Prefect progress artifact at most every
    `every_s` seconds (one API call per document would cost more than a document at 80 documents/s)."""

    def __init__(self, artifact_id: Any, expected: int, every_s: float = 2.0) -> None:
        self.artifact_id, self.expected, self.every_s = artifact_id, expected, every_s
        self._last = 0.0
        self.finished = 0

    def report(self, finished: int, seen: int) -> None:
        """A document finished: the CLI's bar now, the artifact at the next `publish`."""
        self.finished = finished
        progress.report(finished, max(seen, self.expected))

    async def publish(self) -> None:
        """Move the artifact (at most every `every_s` seconds)."""
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            await aupdate_progress_artifact(self.artifact_id,
                                            min(99.0, 100.0 * self.finished / max(self.expected, 1)))

    async def finish(self) -> None:
        await aupdate_progress_artifact(self.artifact_id, 100.0)


async def _publish(summary: dict[str, Any], batches: list[BatchCounts], *, input_dir: str, out_dir: str,
                   made: RunThumbnails | None = None) -> None:
    """Artifacts for the Prefect UI: summary, batches, masked tables of failures and a sample of results, link."""
    await acreate_markdown_artifact(summary_markdown(summary, input_dir=input_dir, out_dir=out_dir),
                                    key="idflow-run-summary", description="idflow run summary")
    if batches:
        await acreate_table_artifact([b.as_row() for b in batches[:ARTIFACT_ROWS]], key="idflow-batches",
                                     description="batches of this run: counts and time (first 200)")
    for name, columns, key in ((FAILURES, FAILURE_COLUMNS, "idflow-failures"),
                               (RESULTS, SAMPLE_COLUMNS, "idflow-results")):
        needed = [*columns, "expiry_long_term"] if name == RESULTS else list(columns)  # long-term shown as such
        table = read_table(Path(out_dir), name, needed, run_id=summary["run_id"])
        rows = table.slice(0, ARTIFACT_ROWS).to_pylist() if table is not None else []
        if rows:
            await acreate_table_artifact(masked_rows(rows, columns, ARTIFACT_ROWS), key=key,
                                         description=f"{name} of this run (names and ID numbers masked)")
    await acreate_link_artifact(Path(out_dir).resolve().as_uri(), link_text="Parquet outputs",
                                key="idflow-outputs")
    await _review_pages(Path(out_dir), summary, made)


async def _review_pages(out: Path, summary: dict[str, Any], made: RunThumbnails | None = None) -> None:
    """The run's review page (inside OUT) and its artifacts, with the thumbnails the run `made`, and the page an
    earlier run owes (`owed_page`). OUT full or not writable here is one line saying that every document is stored
    and only the page is missing."""
    from flows.review import publish_review

    try:
        owed = owed_page(out, summary["run_id"])
        await publish_review(out, summary["run_id"], made=made)
        if owed is not None:
            await asyncio.to_thread(lambda: write_page(build_queue(out, owed)))
            get_run_logger().info("wrote the review page run %s could not write", owed)
    except Exception as exc:
        problem = storage_problem(exc)
        if problem is None:
            raise
        raise OutputWriteError(review_stopped_line(problem, out, summary)) from exc
