"""The task run a person watches for each batch of a run's documents (`pipeline.run.batches`), shared by the
extract and retry flows: it stores its documents, logs its counts (no names or numbers) and returns them."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipeline.run.batches import Batch, BatchCounts, Outcome, record_batch

Record = Callable[[Outcome, str], object]


@task(name="process-batch", persist_result=False, cache_policy=NO_CACHE)
async def process_batch(batch: Batch, record: Record, tick: Callable[[], Awaitable[None]] | None = None
                        ) -> BatchCounts:
    """One batch of the run's documents: prepared (orientation, skew, resize), extracted and validated by the
    run's engine, stored here; its counts are logged and returned."""
    counts = await record_batch(batch, record, tick=tick)
    get_run_logger().info(counts.line())
    return counts


def batch_task(batch: Batch, record: Record, tick: Callable[[], Awaitable[None]] | None = None
               ) -> Coroutine[Any, Any, BatchCounts]:
    """`process_batch` as a task run named after the batch (`batch-00001`)."""
    return process_batch.with_options(task_run_name=batch.name)(batch, record, tick)
