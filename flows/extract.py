"""The `extract-folder` Prefect flow: a thin scheduler over the plain stages in `pipeline/`.

Batches (not single images) are Prefect tasks, so the UI shows a few dozen task runs for a night's folder
instead of thousands. Discovery is streamed and at most `max_batches_in_flight` batches exist at once, so
memory stays flat however large the folder is. One backend instance serves the whole run, so its in-flight
cap and circuit breaker hold across batches.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    acreate_link_artifact,
    acreate_markdown_artifact,
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import get_run_context
from prefect.runtime import flow_run

from flows.limits import request_slots
from flows.secrets import with_block_key
from flows.sharded import read_shard
from pipeline import progress
from pipeline.backends.base import ExtractionBackend
from pipeline.config import Settings
from pipeline.datamodel import DocumentRef, Failure, Reason, Skipped
from pipeline.ingest import Discovery, walk
from pipeline.masking import install_masking
from pipeline.report import FAILURE_COLUMNS, SAMPLE_COLUMNS, masked_rows, summary_markdown
from pipeline.runner import BatchRows, RunTally, make_backend, process_batch
from pipeline.store import FAILURES, RESULTS, RunWriter, done_keys, failure_row, read_table, write_run_summary


@task(name="process-batch", persist_result=False, cache_policy=NO_CACHE)
async def process_batch_task(refs: list[DocumentRef], settings: Settings, backend: ExtractionBackend,
                             prepare_slots: asyncio.Semaphore, run_id: str, fingerprint: str) -> BatchRows:
    """Prepare, extract and validate one batch. Results are rows; personal data never enters task results
    on disk (`persist_result=False`)."""
    return await process_batch(refs, settings, backend, prepare_slots=prepare_slots, run_id=run_id,
                               fingerprint=fingerprint)


def _internal_failures(refs: list[DocumentRef], exc: BaseException, *, run_id: str, fingerprint: str,
                       backend: str) -> BatchRows:
    """A crashed batch still accounts for its documents, as non-retryable internal errors."""
    detail = f"{type(exc).__name__}: {exc}"[:500]
    return BatchRows(failures=[
        failure_row(Failure.for_ref(r, "internal", Reason.INTERNAL_ERROR, detail, backend=backend),
                    fingerprint=fingerprint, run_id=run_id)
        for r in refs
    ])


def _run_id() -> str:
    try:
        return str(get_run_context().flow_run.id)[:8]
    except Exception:  # outside a flow run (tests calling .fn); a random id keeps parts distinct
        return uuid.uuid4().hex[:8]


ARTIFACT_ROWS = 200  # a UI table, not an export: the Parquet link artifact points at the full data


def _run_name() -> str:
    """`extract <folder> (<n> files)`: the folder's own name, not its full path (paths can hold names)."""
    params = flow_run.parameters
    root = Path(params["input_dir"])
    files = len(read_shard(Path(params["shard"]))) if params.get("shard") else sum(1 for _ in walk(root.resolve()))
    return f"extract {root.name} ({files} files)"


@flow(name="extract-folder", flow_run_name=_run_name, log_prints=False)
async def extract_folder(input_dir: str, out_dir: str, backend: str = "ocr", concurrency: int | None = None,
                         batch_size: int | None = None, force: bool = False, dask: str | None = None,
                         shard: str | None = None) -> dict[str, Any]:
    """Extract every document under `input_dir` into Parquet under `out_dir`; returns the run summary.

    `dask` (`tcp://host:8786` or `local:N`) runs the batches on Dask workers (flows/dask_batches.py); `shard`
    is a shard manifest from `extract-sharded` (flows/sharded.py): only the files it lists are processed.
    """
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    overrides: dict[str, Any] = {"backend": backend}
    if concurrency:
        overrides["concurrency"] = concurrency
    if batch_size:
        overrides["batch_size"] = batch_size
    settings = await with_block_key(Settings(**overrides))
    root, out = Path(input_dir), Path(out_dir)
    run_id, fingerprint = _run_id(), settings.fingerprint()
    writer = RunWriter(out, run_id, fingerprint, settings.flush_every)
    tally = RunTally()
    files = read_shard(Path(shard)) if shard else None
    expected_files = len(files) if files is not None else sum(1 for _ in walk(root.resolve()))
    progress_id = await acreate_progress_artifact(0.0, description="documents finished")
    remote = None
    if dask:  # imported here, as backends are in make_backend: the default path never loads Dask
        from flows.dask_batches import DaskBatches

        remote = DaskBatches(dask, overrides, run_id=run_id, fingerprint=fingerprint)
    engine = make_backend(settings) if remote is None else None
    prepare_slots = asyncio.Semaphore(max(1, os.cpu_count() or 1))
    batch_slots = asyncio.Semaphore(remote.max_in_flight if remote else 2 + settings.concurrency // settings.batch_size)
    pending: set[asyncio.Task[None]] = set()

    async def report() -> None:
        done = tally.results + tally.failures + tally.skipped
        progress.report(done, max(tally.seen, expected_files))
        await aupdate_progress_artifact(progress_id, min(99.0, 100.0 * done / max(expected_files, 1)))

    async def run_batch(refs: list[DocumentRef]) -> None:
        try:
            if remote is not None:  # the worker holds the request slots, around its own model calls
                rows = await remote.run(refs)
            else:
                async with request_slots(settings.backend, min(len(refs), settings.concurrency)):
                    rows = await process_batch_task(refs, settings, engine, prepare_slots, run_id, fingerprint)
        except Exception as exc:  # a bug must not lose the batch's documents
            logger.exception("batch of %d documents crashed", len(refs))
            rows = _internal_failures(refs, exc, run_id=run_id, fingerprint=fingerprint, backend=settings.backend)
        finally:
            batch_slots.release()
        writer.add_result_rows(rows.results)
        writer.add_failure_rows(rows.failures)
        tally.add_rows(rows)
        await report()

    async def submit(refs: list[DocumentRef]) -> None:
        await batch_slots.acquire()
        job = asyncio.create_task(run_batch(refs))
        pending.add(job)
        job.add_done_callback(pending.discard)

    done = frozenset() if force else done_keys(out, fingerprint)
    discovery = Discovery(root, done, only=files)
    batch: list[DocumentRef] = []
    try:
        for item in discovery.items():
            tally.seen += 1
            if isinstance(item, Skipped):
                tally.add_skip(item)
            elif isinstance(item, Failure):
                rows = BatchRows(failures=[failure_row(item, fingerprint=fingerprint, run_id=run_id)])
                writer.add_failure_rows(rows.failures)
                tally.add_rows(rows)
            else:
                batch.append(item)
                if len(batch) >= settings.batch_size:
                    await submit(batch)
                    batch = []
        if batch:
            await submit(batch)
        await asyncio.gather(*pending)
    finally:
        writer.flush()
        if engine is not None:
            await engine.aclose()
        if remote is not None:
            remote.close()

    summary = tally.summary(run_id=run_id, settings=settings)
    summary["input_dir"], summary["out_dir"] = str(root), str(out)
    write_run_summary(out, summary)
    await aupdate_progress_artifact(progress_id, 100.0)
    await _publish(summary, input_dir=str(root), out_dir=str(out))
    logger.info("run %s: seen=%d results=%d failures=%d skipped=%d accounted=%s", run_id, summary["seen"],
                summary["results"], summary["failures"], summary["skipped"], summary["accounted"])
    return summary


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
