"""The drift canary of a nightly run (`pipeline.ops.canary`): read it with the run's settings, publish it, alert.

The result (aggregate only) goes into the `idflow-canary` markdown artifact, `OUT/canary/<flow run id>.json` and
the nightly run's returned summary. A degraded canary also emits `idflow.canary.degraded` (resource
`idflow.canary.<backend>`, the aggregate as payload, the nightly flow run as related resource) for an automation
to alert on. The event is posted with a plain HTTP request whose answer is checked, like the upload event:
`emit_event`'s background sender confirms nothing, and a lost alert is the one failure a canary must not have.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from prefect import get_client, get_run_logger, task
from prefect.artifacts import acreate_markdown_artifact
from prefect.events import Event
from prefect.runtime import flow_run

from flows.secrets import with_block_key
from pipeline.ops.canary import CANARY_DIR, CANARY_EVENT, CANARY_RESOURCE, CanaryReport, read_canary
from pipeline.settings import CanarySettings, Settings
from pipeline.store.atomic import write_json_atomic


def degraded_event(report: CanaryReport, run_id: str, run_name: str | None) -> Event:
    """`idflow.canary.degraded` for the canary of flow run `run_id`: aggregate payload only."""
    related = [{"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run",
                **({"prefect.resource.name": run_name} if run_name else {})}]
    return Event(event=CANARY_EVENT, id=uuid.uuid4(), occurred=datetime.now(timezone.utc),
                 resource={"prefect.resource.id": f"{CANARY_RESOURCE}{report.backend}",
                           "prefect.resource.name": f"idflow drift canary ({report.backend})",
                           "idflow.model": report.model},
                 related=related, payload={**report.as_dict(), "flow_run_id": run_id})


@task(name="drift-canary", task_run_name="drift-canary")
async def drift_canary(out_dir: str, backend: str) -> dict[str, Any] | None:
    """Read the canary (IDFLOW_CANARY_DIR; None when unset) with `backend` and the run's settings; publish the
    result and, below IDFLOW_CANARY_MIN_ACCURACY, emit the event."""
    canary = CanarySettings()
    if canary.manifest() is None:
        return None
    logger = get_run_logger()
    report = await read_canary(await with_block_key(Settings(backend=backend)), canary)
    assert report is not None
    run_id = str(flow_run.id)
    result = report.as_dict()
    await acreate_markdown_artifact(report.markdown(), key="idflow-canary",
                                    description="idflow drift canary: known-answer documents read tonight")
    write_json_atomic(Path(out_dir) / CANARY_DIR / f"{run_id}.json", {"run_id": run_id, **result})
    if not report.degraded:
        logger.info("drift canary healthy: field accuracy %.4f over %d documents", report.accuracy,
                    report.documents)
        return result
    async with get_client() as client:
        event = degraded_event(report, run_id, flow_run.name)
        response = await client.request("POST", "/events", json=[event.model_dump(mode="json")])
        response.raise_for_status()
    logger.warning("drift canary degraded: field accuracy %s below %g over %d documents%s; %s emitted",
                   result["accuracy"], report.min_accuracy, report.documents,
                   f" ({report.error})" if report.error else "", CANARY_EVENT)
    return result
