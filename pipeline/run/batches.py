"""A run's documents in batches a person can watch, over one engine stream.

Why batches over one stream rather than one engine pass per batch: an engine pass drains at its end (the last
documents of a batch leave extractors idle), which at 32 requests in flight costs a VLM run a large share of its
throughput. So the documents go through one engine (or one Dask dispatch) as a continuous stream, and each is
only *assigned* to a batch in the order it is discovered: batch 1 is the first `size` items, batch 2 the next.
A batch is open from its first outcome to its last; its owner (a Prefect task in the flows) records its outcomes
and reports its counts. Batches overlap in time, as their documents do in the engine.

No Prefect here: `drive_batches` takes the function that runs one batch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pipeline.datamodel import DocumentRef, Failure, Record, Skipped

Item = DocumentRef | Skipped | Failure
Outcome = Record | Failure | Skipped
_CLOSE = object()  # wakes a batch: no more of its documents will be assigned, or the stream is over


def item_key(thing: Item | Outcome) -> tuple[str, int | None]:
    """What an item and its outcome share, whichever process made the outcome: (relative path, page)."""
    if isinstance(thing, Record):
        ref = thing.extraction.ref
        return ref.rel_path, ref.page
    return thing.rel_path, thing.page


@dataclass
class Batch:
    """Documents `first` .. `first + size - 1` of the run (1-based, in discovery order)."""

    index: int
    first: int
    size: int = 0
    closed: bool = False  # every document of the batch has been assigned
    ended: bool = False  # the stream is over: nothing more will come
    queue: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    @property
    def name(self) -> str:
        return f"batch-{self.index:05d}"


@dataclass
class BatchCounts:
    """What became of one batch's documents (no names, numbers or paths: these go to the Prefect UI)."""

    index: int
    documents: int = 0
    results: int = 0
    failures: int = 0
    skipped: int = 0
    request_attempts: int = 0  # HTTP attempts beyond the first, over the batch's records
    failures_by_reason: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0

    def add(self, outcome: Outcome) -> None:
        self.documents += 1
        if isinstance(outcome, Skipped):
            self.skipped += 1
        elif isinstance(outcome, Failure):
            self.failures += 1
            self.failures_by_reason[str(outcome.reason)] += 1
        else:
            self.results += 1
            self.request_attempts += max(0, outcome.extraction.attempts - 1)

    def line(self) -> str:
        reasons = ", ".join(f"{r} {n}" for r, n in sorted(self.failures_by_reason.items()))
        return (f"batch {self.index}: {self.documents} documents: {self.results} results, {self.failures} failed"
                f"{f' ({reasons})' if reasons else ''}, {self.skipped} skipped; {self.request_attempts} requests "
                f"retried; {self.elapsed_s:.1f} s")

    def as_row(self) -> dict[str, Any]:
        return {"batch": self.index, "documents": self.documents, "results": self.results,
                "failures": self.failures, "skipped": self.skipped, "requests_retried": self.request_attempts,
                "seconds": round(self.elapsed_s, 2)}


class BatchRouter:
    """Assigns items to batches as discovery hands them over, and routes each outcome back to its batch.

    `assign` may run in a worker thread (the folder walk is advanced in one); `route` runs on the event loop."""

    def __init__(self, size: int, loop: asyncio.AbstractEventLoop) -> None:
        self.size = max(1, size)
        self._loop = loop
        self._lock = threading.Lock()
        self._owner: dict[tuple[str, int | None], deque[Batch]] = defaultdict(deque)
        self.batches: dict[int, Batch] = {}
        self._current: Batch | None = None
        self._assigned = 0

    def assign(self, items: Iterable[Item]) -> Iterator[Item]:
        """The same items, each assigned to a batch before it is passed on."""
        for item in items:
            with self._lock:
                self._assigned += 1
                if self._current is None:
                    self._current = Batch(len(self.batches) + 1, self._assigned)
                    self.batches[self._current.index] = self._current
                batch = self._current
                batch.size += 1
                self._owner[item_key(item)].append(batch)
                if batch.size >= self.size:
                    self._close(batch)
            yield item
        with self._lock:
            if self._current is not None:
                self._close(self._current)

    def _close(self, batch: Batch) -> None:
        batch.closed = True
        self._current = None
        self._loop.call_soon_threadsafe(batch.queue.put_nowait, _CLOSE)

    def route(self, outcome: Outcome, worker: str) -> Batch | None:
        """Hand `outcome` (made by `worker`) to its batch; None for an outcome no item was assigned for."""
        with self._lock:
            owners = self._owner.get(item_key(outcome))
            if not owners:
                return None
            batch = owners.popleft()
            if not owners:
                del self._owner[item_key(outcome)]
        batch.queue.put_nowait((outcome, worker))
        return batch

    def end(self) -> None:
        """The stream is over: every batch still waiting returns with what it got."""
        for batch in self.batches.values():
            batch.ended = True
            batch.queue.put_nowait(_CLOSE)


async def batch_outcomes(batch: Batch) -> AsyncIterator[tuple[Outcome, str]]:
    """(outcome, worker) of `batch` as they come, until all of its documents are back (or the stream ended)."""
    received = 0
    while not (batch.closed and received >= batch.size) and not (batch.ended and batch.queue.empty()):
        pair = await batch.queue.get()
        if pair is _CLOSE:
            continue
        received += 1
        yield pair


async def record_batch(batch: Batch, record: Callable[[Outcome, str], object],
                       tick: Callable[[], Awaitable[None]] | None = None) -> BatchCounts:
    """Record every outcome of `batch` (`record(outcome, worker)`) and count them; `tick` after each."""
    counts, started = BatchCounts(batch.index), time.monotonic()
    async for outcome, worker in batch_outcomes(batch):
        record(outcome, worker)
        counts.add(outcome)
        if tick is not None:
            await tick()
    counts.elapsed_s = time.monotonic() - started
    return counts


async def local_outcomes(outcomes: AsyncIterable[Outcome], worker: str = "local"
                         ) -> AsyncIterator[tuple[Outcome, str]]:
    """An engine's outcomes as `drive_batches` takes them: each with the worker that made it."""
    async for outcome in outcomes:
        yield outcome, worker


async def drive_batches(router: BatchRouter, outcomes: AsyncIterable[tuple[Outcome, str]],
                        run_batch: Callable[[Batch], Awaitable[BatchCounts]],
                        record: Callable[[Outcome, str], object]) -> list[BatchCounts]:
    """Route every outcome of the stream to its batch, starting `run_batch(batch)` when a batch's first outcome
    arrives; return every batch's counts in batch order. An outcome no item was assigned for is recorded here
    (`record`), so nothing is lost even then. A batch that fails stops the run with its error."""
    running: dict[int, asyncio.Task[BatchCounts]] = {}
    failed: list[BaseException] = []

    def note(task: asyncio.Task[BatchCounts]) -> None:
        if not task.cancelled() and task.exception() is not None:
            failed.append(task.exception())  # type: ignore[arg-type]

    try:
        async for outcome, worker in outcomes:
            if failed:
                raise failed[0]
            batch = router.route(outcome, worker)
            if batch is None:
                record(outcome, worker)
            elif batch.index not in running:
                running[batch.index] = task = asyncio.create_task(run_batch(batch), name=batch.name)
                task.add_done_callback(note)
        router.end()
        return [await running[i] for i in sorted(running)]
    finally:
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
