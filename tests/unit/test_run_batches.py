"""Batches over one stream: every outcome reaches the batch its item was assigned to, batches end when their last
document is back, and nothing is lost when an outcome has no batch or a batch fails."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef, Failure, Reason, Skipped, SkipReason
from pipeline.run.batches import Batch, BatchCounts, BatchRouter, drive_batches, item_key, record_batch


def _items(n: int) -> list:
    items: list = []
    for i in range(n):
        if i % 7 == 3:
            items.append(Skipped(f"{i}.jpg", SkipReason.DUPLICATE_CONTENT, f"{i:064d}", 0))
        else:
            items.append(DocumentRef(path=Path(f"{i}.jpg"), rel_path=f"{i}.jpg", sha256=f"{i:064d}"))
    return items


def _outcome(item):
    if isinstance(item, DocumentRef):  # a failure made from the ref, as an engine stage makes one
        return Failure.for_ref(item, "request", Reason.TIMEOUT, "no answer")
    return item


async def _shuffled_outcomes(items: Iterator, seed: int) -> AsyncIterator[tuple[object, str]]:
    """Outcomes in an order other than discovery's, as the engine's completion order is."""
    rng, window = random.Random(seed), []
    for item in items:
        window.append(item)
        if len(window) > 5:
            yield _outcome(window.pop(rng.randrange(len(window)))), "w1"
        await asyncio.sleep(0)
    rng.shuffle(window)
    for item in window:
        yield _outcome(item), "w2"


def _drive(n: int, size: int, seed: int = 0) -> tuple[list[BatchCounts], list[tuple[object, str]]]:
    recorded: list[tuple[object, str]] = []

    async def go() -> list[BatchCounts]:
        router = BatchRouter(size, asyncio.get_running_loop())
        stream = _shuffled_outcomes(router.assign(_items(n)), seed)
        return await drive_batches(router, stream, lambda b: record_batch(b, lambda o, w: recorded.append((o, w))),
                                   lambda o, w: recorded.append((o, w)))

    counts = asyncio.run(go())
    return counts, recorded


@pytest.mark.parametrize(("n", "size"), [(1, 16), (16, 16), (17, 16), (100, 7), (50, 1)])
def test_every_outcome_is_recorded_once_in_its_own_batch(n: int, size: int) -> None:
    counts, recorded = _drive(n, size, seed=n)
    assert sorted(item_key(o) for o, _ in recorded) == sorted(item_key(i) for i in _items(n))
    assert [c.index for c in counts] == list(range(1, -(-n // size) + 1))
    assert [c.documents for c in counts] == [min(size, n - size * k) for k in range(len(counts))]
    assert sum(c.skipped for c in counts) == sum(isinstance(i, Skipped) for i in _items(n))
    assert sum(c.failures_by_reason["timeout"] for c in counts) == sum(isinstance(i, DocumentRef) for i in _items(n))


def test_a_batch_holds_the_documents_assigned_to_it() -> None:
    seen_by_batch: dict[int, list[str]] = {}

    async def go() -> None:
        router = BatchRouter(4, asyncio.get_running_loop())

        async def run_batch(batch: Batch) -> BatchCounts:
            seen_by_batch[batch.index] = []
            return await record_batch(batch, lambda o, w: seen_by_batch[batch.index].append(item_key(o)[0]))

        await drive_batches(router, _shuffled_outcomes(router.assign(_items(10)), 3), run_batch,
                            lambda o, w: None)

    asyncio.run(go())
    assert {k: sorted(v, key=lambda p: int(p.split(".")[0])) for k, v in seen_by_batch.items()} == {
        1: ["0.jpg", "1.jpg", "2.jpg", "3.jpg"], 2: ["4.jpg", "5.jpg", "6.jpg", "7.jpg"], 3: ["8.jpg", "9.jpg"]}


def test_an_outcome_no_item_was_assigned_for_is_still_recorded() -> None:
    stray = Failure("elsewhere.jpg", None, None, "internal", Reason.INTERNAL_ERROR, "odd")
    recorded: list = []

    async def go() -> list[BatchCounts]:
        router = BatchRouter(2, asyncio.get_running_loop())
        items = list(router.assign(_items(3)))

        async def stream() -> AsyncIterator[tuple[object, str]]:
            yield stray, "local"
            for item in items:
                yield _outcome(item), "local"

        return await drive_batches(router, stream(), lambda b: record_batch(b, lambda o, w: recorded.append(o)),
                                   lambda o, w: recorded.append(o))

    counts = asyncio.run(go())
    assert stray in recorded and len(recorded) == 4 and [c.documents for c in counts] == [2, 1]


def test_a_failing_batch_stops_the_run_with_its_error() -> None:
    async def go() -> None:
        router = BatchRouter(2, asyncio.get_running_loop())

        def record(outcome: object, worker: str) -> None:
            raise OSError(28, "No space left on device")

        await drive_batches(router, _shuffled_outcomes(router.assign(_items(40)), 1),
                            lambda b: record_batch(b, record), record)

    with pytest.raises(OSError, match="No space left"):
        asyncio.run(go())


def test_a_stream_that_ends_early_ends_its_batches() -> None:
    """A stream cut short (the engine stopped) leaves no batch waiting for documents that will never come."""
    async def go() -> list[BatchCounts]:
        router = BatchRouter(10, asyncio.get_running_loop())
        items = router.assign(_items(30))

        async def stream() -> AsyncIterator[tuple[object, str]]:
            for _ in range(15):
                yield _outcome(next(items)), "local"

        return await asyncio.wait_for(drive_batches(router, stream(), lambda b: record_batch(b, lambda o, w: None),
                                                    lambda o, w: None), 30)

    counts = asyncio.run(go())
    assert [c.documents for c in counts] == [10, 5]


def test_counts_say_nothing_personal() -> None:
    counts = BatchCounts(3, documents=4, results=3, failures=1)
    counts.failures_by_reason["timeout"] = 1
    assert counts.line().startswith("batch 3: 4 documents: 3 results, 1 failed (timeout 1), 0 skipped;")
    assert set(counts.as_row()) == {"batch", "documents", "results", "failures", "skipped", "requests_retried",
                                    "seconds"}
