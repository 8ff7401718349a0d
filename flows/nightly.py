"""The `nightly` flow: every complete upload folder of the inbox not yet done, each as a child flow run.

Children are `extract-folder` subflows (called from this flow), so the UI shows one nightly run with one child
per folder, each with its own artifacts. A folder is marked done in `OUT/state/folders.json` only after its
child finished with every document accounted for; a failed child leaves the folder for the next night and
fails this run, so the morning view shows it. Each run first reads the drift canary (`flows.canary`, when
IDFLOW_CANARY_DIR is set): known-answer documents scored in memory, outside OUT's results and accounting.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, tags
from prefect.artifacts import acreate_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowFilter,
    FlowFilterName,
    FlowRunFilter,
    FlowRunFilterState,
    FlowRunFilterStateType,
)
from prefect.client.schemas.objects import StateType
from prefect.runtime import flow_run

from flows.canary import drift_canary
from flows.extract import extract_folder
from pipeline.extract.registry import model_name
from pipeline.ingest import sources
from pipeline.ingest.inbox import Completion, FolderLedger, folder_key, is_text, nightly_markdown, plan_nightly
from pipeline.masking import install_masking, redact
from pipeline.settings import Settings
from pipeline.store.parquet import readable_path

_UNFINISHED = [StateType.SCHEDULED, StateType.PENDING, StateType.RUNNING, StateType.PAUSED]


async def _folders_in_flight(out: Path) -> set[str]:
    """Folders an unfinished `extract-folder` run (e.g. an on-upload run) is working on right now; processing
    them here too would extract the same documents twice in parallel. A run names its folder by a reference
    (`pipeline.ingest.sources`), resolved in `out`; one made for another OUT is another dataset's business."""
    async with get_client() as client:
        runs = await client.read_flow_runs(
            flow_filter=FlowFilter(name=FlowFilterName(any_=[extract_folder.name])),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=FlowRunFilterStateType(any_=_UNFINISHED))))
    folders = set()
    for run in runs:
        try:
            folders.add(folder_key(sources.resolve(out, str(run.parameters["input_dir"]))))
        except (KeyError, ValueError, OSError):
            continue
    return folders


def _run_name() -> str:
    return redact(f"nightly {flow_run.parameters['inbox']}")  # the inbox's name, numbers in it masked


@flow(name="nightly", flow_run_name=_run_name, log_prints=False)
async def nightly(inbox: str, out_dir: str, backend: str = "ocr", marker: str = "_READY",
                  quiet_seconds: float | None = None, parallel_folders: int = 1) -> dict[str, Any]:
    """Process each complete, not yet done upload folder under `inbox` into the shared dataset `out_dir`.

    Complete = has `marker`, or (if `quiet_seconds` is set) unchanged that long with no partial files.
    """
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    canary = await drift_canary(out_dir, backend)
    out = Path(out_dir)
    ledger = FolderLedger.load(out)
    plan = plan_nightly(Path(inbox), ledger, Completion(marker, quiet_seconds), await _folders_in_flight(out))
    unnamed = [f for f in plan.todo if not is_text(f.name)]
    if unnamed:  # each is left as it is, every night, with this line; the others are done
        logger.warning("nightly: %d upload folders not run, their names are not UTF-8 (rename them): %s",
                       len(unnamed), ", ".join(readable_path(f.name) for f in unnamed))
        plan.todo = [f for f in plan.todo if is_text(f.name)]
    logger.info("nightly: %d folders to do, %d already done, %d in flight elsewhere, %d incomplete",
                len(plan.todo), len(plan.already_done), len(plan.in_flight), len(plan.incomplete))
    outcomes: dict[str, str] = {}
    slots = asyncio.Semaphore(max(1, parallel_folders))
    model = model_name(Settings(backend=backend))

    async def one(folder: Path) -> None:
        try:
            async with slots:
                with tags(f"backend:{backend}", f"model:{model}", "nightly"):
                    state = await extract_folder(sources.folder_reference(out, folder), out_dir, backend=backend,
                                                 return_state=True)  # the folder's name is no parameter
        except Exception as exc:  # noqa: BLE001 - one folder's trouble must not sink the others
            outcomes[folder_key(folder)] = f"not started ({type(exc).__name__}), left for the next run"
            return
        if not state.is_completed():
            outcomes[folder_key(folder)] = f"child run {state.type.value.lower()}, left for the next run"
            return
        summary = await state.aresult()
        if not summary["accounted"]:
            outcomes[folder_key(folder)] = "documents unaccounted for, left for the next run"
            return
        ledger.mark_done(folder, summary["run_id"], via="nightly")
        outcomes[folder_key(folder)] = (f"done: {summary['results']} results, {summary['failures']} failures, "
                                        f"{summary['skipped']} skipped")

    await asyncio.gather(*(one(f) for f in plan.todo))
    await acreate_markdown_artifact(nightly_markdown(plan, outcomes), key="idflow-nightly-summary",
                                    description="idflow nightly: what happened to each upload folder")
    not_done = [f.name for f in plan.todo if not ledger.is_done(f)]
    if not_done:
        raise RuntimeError(f"{len(not_done)} upload folders were not finished; see the nightly artifact")
    folders = {key: [redact(readable_path(f.name)) for f in found]
               for key, found in (("done", plan.todo), ("already_done", plan.already_done),
                                  ("in_flight", plan.in_flight), ("incomplete", plan.incomplete))}
    return {**folders, "canary": canary}
