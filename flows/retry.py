"""The `retry-failures` flow: a thin Prefect wrapper around `pipeline.ops.retry.retry_failures`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact

from flows.batch_tasks import batch_task
from flows.extract import _run_id
from flows.limits import request_slots
from flows.run_lease import leased
from flows.secrets import with_block_key
from flows.sigterm import stops_on_sigterm
from pipeline.masking import install_masking
from pipeline.ops.retry import retry_failures as retry_open_failures
from pipeline.settings import Settings


@flow(name="retry-failures", flow_run_name="retry failures", log_prints=False)
@stops_on_sigterm
@leased
async def retry_failures(out_dir: str, backend: str | None = None, max_attempts: int = 3,
                         wait_for_lock: bool = True) -> dict[str, Any]:
    """Re-run the open failure-queue entries of OUT that have attempts left (at most `max_attempts` in total
    per document, the original run included; 2 for internal errors) with `backend` (default: the configured
    one), whatever backend recorded them; resolved entries are recorded, nothing is deleted. OUT busy: wait
    (logged), or with `wait_for_lock=False` raise `OutputBusy`."""
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    settings = await with_block_key(Settings(**({"backend": backend} if backend else {})))
    report = await retry_open_failures(Path(out_dir), settings, run_id=_run_id(), max_attempts=max_attempts,
                                       slot=lambda: request_slots(settings.backend, 1), wait=wait_for_lock,
                                       on_wait=logger.warning, run_batch=batch_task)
    await acreate_markdown_artifact(report.markdown(), key="idflow-retry-summary",
                                    description="idflow retry of the failure queue")
    logger.info("retry %s: %s", report.run_id, report.as_dict())
    return report.as_dict()
