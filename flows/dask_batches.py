"""Dask execution of `extract-folder` batches: the CPU-heavy stages (load, orient, resize, embedded OCR) on
Dask workers, through `prefect_dask.DaskTaskRunner`.

Why not `flows/distributed.py`: Prefect loads a deployment's entrypoint (`flows/extract.py`) as a script with
`flows/` first on sys.path, so a module named `distributed` there would shadow the Dask package.

Why batches of paths: a batch is the unit the in-process path already schedules, and a `DocumentRef` carries
only a path and a hash, so images are read by the worker from (shared) storage and never pass through the
scheduler as bytes. Only rows come back.

Why the flow keeps writing: rows reach Parquet only from completed task results, once per batch, in the flow
process. A worker killed mid-batch wrote nothing; Dask reruns the batch on a surviving worker and the flow
sees exactly one result for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

import distributed
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect_dask import DaskTaskRunner

from flows.limits import request_slots
from pipeline.backends.base import ExtractionBackend
from pipeline.config import Settings
from pipeline.datamodel import DocumentRef
from pipeline.runner import BatchRows, make_backend, process_batch

LOCAL_PREFIX = "local:"


def task_runner(dask: str) -> DaskTaskRunner:
    """`local:N` is a LocalCluster of N worker processes with one thread each (one CPU-bound batch per
    process, no GIL contention); anything else is the address of an existing scheduler (`tcp://host:8786`)."""
    if not dask.startswith(LOCAL_PREFIX):
        return DaskTaskRunner(address=dask)
    count = dask.removeprefix(LOCAL_PREFIX)
    if not count.isdigit() or int(count) < 1:
        raise ValueError(f"--dask {dask!r}: expected local:N with N >= 1, or a scheduler address")
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs={
        "n_workers": int(count), "threads_per_worker": 1, "processes": True, "dashboard_address": None})


class _WorkerRuntime:
    """What one worker process keeps between batches: an event loop on its own thread and one backend per
    settings. Why not `asyncio.run` per batch: a cached backend's semaphores and HTTP clients are bound to the
    loop that first used them, so every batch must run on the same loop."""

    def __init__(self, nthreads: int) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="idflow-worker-loop", daemon=True).start()
        self.prepare_slots = asyncio.Semaphore(max(1, nthreads))  # the worker's CPU budget, not the machine's
        self.backends: dict[tuple[str, int], ExtractionBackend] = {}

    def run(self, refs: Sequence[DocumentRef], settings: Settings, *, run_id: str, fingerprint: str) -> BatchRows:
        return asyncio.run_coroutine_threadsafe(
            self._batch(refs, settings, run_id=run_id, fingerprint=fingerprint), self.loop).result()

    async def _batch(self, refs: Sequence[DocumentRef], settings: Settings, *, run_id: str,
                     fingerprint: str) -> BatchRows:
        key = (fingerprint, settings.concurrency)
        backend = self.backends.get(key) or self.backends.setdefault(key, make_backend(settings))
        async with request_slots(settings.backend, min(len(refs), settings.concurrency)):
            return await process_batch(refs, settings, backend, prepare_slots=self.prepare_slots, run_id=run_id,
                                       fingerprint=fingerprint)


_runtime: _WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def _worker_runtime(nthreads: int) -> _WorkerRuntime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _WorkerRuntime(nthreads)
        return _runtime


def worker_settings(overrides: dict[str, Any], fingerprint: str) -> Settings:
    """Settings on the worker: its own environment (secrets never travel through the scheduler) plus the run's
    overrides. A worker configured differently from the flow would label its rows with a fingerprint they were
    not made with, so that is refused."""
    settings = Settings(**overrides)
    if settings.fingerprint() != fingerprint:
        raise RuntimeError(f"worker settings fingerprint {settings.fingerprint()} differs from the run's "
                           f"{fingerprint}: align IDFLOW_* settings (and .env) on every Dask worker")
    return settings


@task(name="process-batch-dask", persist_result=False, cache_policy=NO_CACHE)
def process_batch_on_worker(refs: list[DocumentRef], overrides: dict[str, Any], run_id: str,
                            fingerprint: str) -> BatchRows:
    """One batch on a Dask worker; every result row records the worker's address."""
    worker = distributed.get_worker()
    settings = worker_settings(overrides, fingerprint)
    rows = _worker_runtime(worker.state.nthreads).run(refs, settings, run_id=run_id, fingerprint=fingerprint)
    for row in rows.results:
        row["worker"] = worker.address
    return rows


async def _finished(future: distributed.Future) -> None:
    """Wait for a Dask future without blocking the flow's event loop (the Dask client runs its own loop)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def wake(_: distributed.Future) -> None:
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

    future.add_done_callback(wake)
    await done


class DaskBatches:
    """The flow's side of Dask mode: a started `DaskTaskRunner` and one awaitable call per batch.

    `max_in_flight` is two batches per worker thread at start: each worker has one running and one waiting, so
    it never idles between batches, and a million-document folder never becomes a million futures.
    """

    def __init__(self, dask: str, overrides: dict[str, Any], *, run_id: str, fingerprint: str) -> None:
        self.overrides, self.run_id, self.fingerprint = overrides, run_id, fingerprint
        self.runner = task_runner(dask).__enter__()
        try:
            threads = sum(self.runner.client.nthreads().values())
        except BaseException:
            self.close()
            raise
        self.max_in_flight = max(2, 2 * threads)

    async def run(self, refs: list[DocumentRef]) -> BatchRows:
        future = self.runner.submit(process_batch_on_worker, parameters={
            "refs": refs, "overrides": self.overrides, "run_id": self.run_id, "fingerprint": self.fingerprint})
        await _finished(future.wrapped_future)
        return future.result()

    def close(self) -> None:
        """Disconnect; a LocalCluster started for `local:N` is shut down with its worker processes."""
        self.runner.__exit__(None, None, None)
