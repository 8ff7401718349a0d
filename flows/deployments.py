"""The deployment set served by `idflow serve`: `on-upload`, `nightly`, `retry-failures` and `review`.

`deployments/prefect.yaml` declares the same ones for `prefect deploy --all` with a process work pool (plus
the work-pool-only `shard` and `sharded`); tests/unit/test_deployments.py fails when the two disagree (names,
entrypoints, parameters, schedules, limits, trigger, descriptions).
"""

from __future__ import annotations

from prefect.deployments.runner import RunnerDeployment
from prefect.events import DeploymentEventTrigger
from prefect.schedules import Cron

from flows.extract import extract_folder
from flows.nightly import nightly
from flows.retry import retry_failures
from flows.review import review
from flows.watch import RESOURCE_PREFIX, UPLOAD_EVENT
from pipeline.settings import ScheduleSettings


def upload_trigger(out_dir: str, backend: str) -> DeploymentEventTrigger:
    """Start `extract-folder` on `idflow.upload.ready` from `idflow watch`. `match` names our resources: the
    default (empty) match would fire on any resource that ever emits an event of that name. The folder is passed
    as the event's reference (`ref`), which the flow resolves inside OUT: its path is not a flow parameter."""
    return DeploymentEventTrigger(
        name="idflow-upload-ready",
        expect={UPLOAD_EVENT},
        match={"prefect.resource.id": f"{RESOURCE_PREFIX}*"},
        parameters={"input_dir": "{{ event.payload.ref }}", "out_dir": out_dir, "backend": backend},
    )


def build_deployments(*, inbox: str, out_dir: str, backend: str, model: str, schedule: ScheduleSettings,
                      max_attempts: int = 3) -> list[RunnerDeployment]:
    """The three deployments, with absolute paths baked into their parameters (runs start in other processes),
    scheduled as `schedule` says (IDFLOW_TIMEZONE, IDFLOW_NIGHTLY_CRON, IDFLOW_RETRY_CRON)."""
    tz = schedule.timezone
    run_tags = ["idflow", f"backend:{backend}", f"model:{model}"]
    return [
        extract_folder.to_deployment(
            name="on-upload", tags=[*run_tags, "on-upload"],
            parameters={"out_dir": out_dir, "backend": backend},
            triggers=[upload_trigger(out_dir, backend)],
            description="One upload folder, started by idflow.upload.ready from `idflow watch`."),
        nightly.to_deployment(
            name="nightly", tags=[*run_tags, "nightly"], concurrency_limit=1,
            parameters={"inbox": inbox, "out_dir": out_dir, "backend": backend},
            schedules=[Cron(schedule.nightly_cron, timezone=tz)],
            description="Every complete upload folder not yet done, one child run each."),
        retry_failures.to_deployment(
            name="retry-failures", tags=[*run_tags, "retry"], concurrency_limit=1,
            parameters={"out_dir": out_dir, "backend": backend, "max_attempts": max_attempts},
            schedules=[Cron(schedule.retry_cron, timezone=tz)],
            description="Retry failure-queue entries with retryable reasons (request errors, endpoint down)."),
        review.to_deployment(
            name="review", tags=[*run_tags, "review"], parameters={"out_dir": out_dir},
            description="Review page of a run, then corrections asked for in the UI, one document at a time."),
    ]
