"""Dask execution of `extract-folder`: the CPU-heavy stages (load, orient, resize, embedded OCR) on Dask workers,
through `prefect_dask.DaskTaskRunner`. Each worker runs the same `pipeline.run.engine.Engine` as the local path, on
batches of documents.

Why not `flows/distributed.py`: Prefect loads a deployment's entrypoint (`flows/extract.py`) as a script with
`flows/` first on sys.path, so a module named `distributed` there would shadow the Dask package.

Why batches of paths: a `DocumentRef` carries only a path and a hash, so images are read by the worker from
(shared) storage and never pass through the scheduler as bytes. Only outcomes come back, without pixels.

Why the flow keeps writing: outcomes reach Parquet only from completed task results, once per batch, in the flow
process. A worker killed mid-batch wrote nothing; Dask reruns the batch on a surviving worker and the flow sees
exactly one outcome per document.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from typing import Any

import distributed
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect_dask import DaskTaskRunner

from flows.limits import request_slots
from flows.secrets import with_block_key
from pipeline.datamodel import DocumentRef
from pipeline.extract import registry
from pipeline.extract.factory import make_backend
from pipeline.run.engine import Engine, Item, Outcome
from pipeline.settings import Settings

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
    """What one worker process keeps between batches: an event loop on its own thread and one engine per
    settings. Why not `asyncio.run` per batch: a cached backend's semaphores and HTTP clients are bound to the
    loop that first used them, so every batch must run on the same loop."""

    def __init__(self, nthreads: int) -> None:
        self.nthreads = max(1, nthreads)  # the worker's CPU budget, not the machine's
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="idflow-worker-loop", daemon=True).start()
        self.engines: dict[str, Engine] = {}

    def run(self, refs: list[DocumentRef], overrides: dict[str, Any], fingerprint: str) -> list[Outcome]:
        return asyncio.run_coroutine_threadsafe(self._batch(refs, overrides, fingerprint), self.loop).result()

    async def _batch(self, refs: list[DocumentRef], overrides: dict[str, Any], fingerprint: str) -> list[Outcome]:
        engine = self.engines.get(fingerprint)
        if engine is None:
            settings = await worker_settings(overrides, fingerprint)
            engine = self.engines.setdefault(fingerprint, Engine(
                settings, make_backend(settings), prepare_workers=self.nthreads,
                request_slot=lambda: request_slots(settings.backend, 1)))
        return [outcome async for outcome in engine.run(refs)]


_runtime: _WorkerRuntime | None = None
_runtime_lock = threading.Lock()


def _worker_runtime(nthreads: int) -> _WorkerRuntime:
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = _WorkerRuntime(nthreads)
        return _runtime


async def worker_settings(overrides: dict[str, Any], fingerprint: str) -> Settings:
    """Settings on the worker: its own environment (secrets never travel through the scheduler; the key comes
    from the environment, `.env` or the same Prefect Secret block as the flow's) plus the run's overrides. A
    worker configured differently from the flow would label its rows with a fingerprint they were not made with,
    so that is refused."""
    settings = await with_block_key(Settings(**overrides))
    if registry.fingerprint(settings) != fingerprint:
        raise RuntimeError(f"worker settings fingerprint {registry.fingerprint(settings)} differs from the run's "
                           f"{fingerprint}: align IDFLOW_* settings (and .env) on every Dask worker")
    return settings


@task(name="process-batch-dask", persist_result=False, cache_policy=NO_CACHE)
def process_batch_on_worker(refs: list[DocumentRef], overrides: dict[str, Any],
                            fingerprint: str) -> tuple[list[Outcome], str]:
    """One batch on a Dask worker: its outcomes and the worker's address (stored in each result row)."""
    worker = distributed.get_worker()
    return _worker_runtime(worker.state.nthreads).run(refs, overrides, fingerprint), worker.address


async def _finished(future: distributed.Future) -> None:
    """Wait for a Dask future without blocking the flow's event loop (the Dask client runs its own loop)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def wake(_: distributed.Future) -> None:
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result(None))

    future.add_done_callback(wake)
    await done


class DaskBatches:
    """The flow's side of Dask mode: a started `DaskTaskRunner` fed batches of documents.

    At most two batches per worker thread are submitted at once: each worker has one running and one waiting,
    so it never idles between batches, and a million-document folder never becomes a million futures.
    """

    def __init__(self, dask: str, overrides: dict[str, Any], *, fingerprint: str, batch_size: int) -> None:
        self.overrides, self.fingerprint, self.batch_size = overrides, fingerprint, max(1, batch_size)
        self._dask = dask

    def __enter__(self) -> DaskBatches:
        self.runner = task_runner(self._dask).__enter__()
        try:
            threads = sum(self.runner.client.nthreads().values())
        except BaseException:
            self.__exit__()
            raise
        self.max_in_flight = max(2, 2 * threads)
        return self

    def __exit__(self, *exc: object) -> None:
        """Disconnect; a LocalCluster started for `local:N` is shut down with its worker processes."""
        self.runner.__exit__(None, None, None)

    async def run(self, items: Iterable[Item]) -> AsyncIterator[tuple[Outcome, str]]:
        """Skips and ingest failures pass straight through; documents go to workers in batches."""
        in_flight: set[asyncio.Task[tuple[list[Outcome], str]]] = set()
        batch: list[DocumentRef] = []
        iterator = iter(items)
        while (item := await asyncio.to_thread(next, iterator, None)) is not None or batch or in_flight:
            if isinstance(item, DocumentRef):
                batch.append(item)
            elif item is not None:
                yield item, "local"
            if batch and (len(batch) >= self.batch_size or item is None):
                in_flight.add(asyncio.create_task(self._submit(batch)))
                batch = []
            while in_flight and (len(in_flight) >= self.max_in_flight or item is None):
                finished, in_flight = await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
                for job in finished:
                    outcomes, worker = job.result()
                    for outcome in outcomes:
                        yield outcome, worker

    async def _submit(self, refs: list[DocumentRef]) -> tuple[list[Outcome], str]:
        future = self.runner.submit(process_batch_on_worker, parameters={
            "refs": refs, "overrides": self.overrides, "fingerprint": self.fingerprint})
        await _finished(future.wrapped_future)
        return future.result()
