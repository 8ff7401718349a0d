"""The `retry-failures` flow: a thin Prefect wrapper around `pipeline.failure_queue.retry_failures`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import acreate_markdown_artifact

from flows.extract import _run_id
from flows.limits import request_slots
from pipeline.config import Settings
from pipeline.failure_queue import retry_failures as retry_open_failures
from pipeline.masking import install_masking


@flow(name="retry-failures", flow_run_name="retry {backend} failures", log_prints=False)
async def retry_failures(out_dir: str, backend: str = "ocr", max_attempts: int = 3) -> dict[str, Any]:
    """Re-run open, retryable failure-queue entries of `backend` in OUT (at most `max_attempts` in total per
    document, the original run included); resolved entries are recorded, nothing is deleted."""
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    report = await retry_open_failures(Path(out_dir), Settings(backend=backend), run_id=_run_id(),
                                       max_attempts=max_attempts,
                                       slot=lambda: request_slots(backend, 1))
    await acreate_markdown_artifact(report.markdown(), key="idflow-retry-summary",
                                    description="idflow retry of the failure queue")
    get_run_logger().info("retry %s: %s", report.run_id, report.as_dict())
    return report.as_dict()
