"""`idflow batch export|import`: OpenAI Batch JSONL files for `vllm run-batch` or a provider's batch API.

Thin: configuration checks and printing; the work is in `pipeline.ops.batch_files`, and an import is stored through
the same run session as every other run. Messages go to stderr.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from idflow.common import config_error, load_settings_pair
from pipeline.datamodel import Failure, PreparedImage, Record, Skipped
from pipeline.extract import registry
from pipeline.extract.registry import OCR, OPENAI
from pipeline.settings import Settings

if TYPE_CHECKING:
    from pipeline.datamodel import Extraction
    from pipeline.trust.table import Trust

batch_app = typer.Typer(no_args_is_help=True, help="OpenAI Batch JSONL files for `vllm run-batch` or a batch API.")


def _say(message: str) -> None:
    typer.echo(message, err=True)


_settings = load_settings_pair


@batch_app.command("export")
def export(
    input_dir: Annotated[Path, typer.Argument(help="folder of scans (searched recursively)")],
    file: Annotated[Path, typer.Argument(help="requests file to write (.jsonl); the manifest goes beside it")],
    model: Annotated[Optional[str], typer.Option(help="model id for the requests [default: TAOTOKEN_MODEL, "
                                                      "else IDFLOW_VLLM_MODEL]")] = None,
) -> None:
    """Prepare every page under INPUT_DIR and write one chat request per page in the OpenAI Batch format."""
    from pipeline.ops.batch_files import export_requests

    settings, vllm = _settings()
    if not input_dir.is_dir():
        raise config_error(f"input folder {input_dir} does not exist or is not a folder")
    model = model or settings.openai.model or vllm.model
    if not model:
        raise config_error("no model id: pass --model (the served model name for `vllm run-batch`)")
    # The batch request is the OpenAI-compatible backend's request, so results carry that fingerprint.
    fingerprint = registry.fingerprint(settings.model_copy(update={
        "backend": OPENAI.name, "openai": settings.openai.model_copy(update={"model": model})}))
    summary = asyncio.run(export_requests(_prepared_pages(input_dir, settings), file, request=settings.openai,
                                          model=model, fingerprint=fingerprint))
    typer.echo(f"{summary.requests} requests -> {summary.requests_path}; {summary.failures} pages failed before "
               f"a request (recorded in {summary.manifest_path})")


async def _prepared_pages(input_dir: Path, settings: Settings) -> AsyncIterator[PreparedImage | Failure]:
    """The engine's prepare stage over the folder (every core); skips (hidden, duplicates) have nothing to export."""
    from pipeline.extract.factory import make_backend
    from pipeline.ingest.discover import Discovery
    from pipeline.run.engine import Engine

    async with Engine(settings, make_backend(settings, OCR.name)) as engine:
        async for item in engine.prepared(Discovery(input_dir, settings=settings.prepare).items()):
            if not isinstance(item, Skipped):
                yield item


@batch_app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="batch output file (.jsonl) from `vllm run-batch` or a batch API")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder for Parquet results")],
    manifest: Annotated[Optional[Path], typer.Option(help="the export's manifest [default: the only "
                                                          "*.manifest.jsonl beside FILE]")] = None,
    wait: Annotated[bool, typer.Option(help="wait for a run writing OUT instead of refusing (exit 2)")] = False,
) -> None:
    """Parse and validate every answer; write results and the failure queue as a run would. Pages OUT already
    has a result for are skipped (`already_done`). Exit 0 when every page of the export is accounted for."""
    from pipeline.masking import redact
    from pipeline.ops.batch_files import find_manifest, import_responses, read_manifest, store_import
    from pipeline.store.output_lock import OutputBusy
    from pipeline.store.parquet import OutputUnreadable

    settings, _ = _settings()
    if not file.is_file():
        raise config_error(f"batch output {file} not found")
    if manifest is not None and not manifest.is_file():
        raise config_error(f"manifest {manifest} not found (--manifest names the export's *.manifest.jsonl)")
    manifest = manifest or find_manifest(file)
    if manifest is None:
        raise config_error(f"no single *.manifest.jsonl beside {file}: pass --manifest")
    try:
        recorded = read_manifest(manifest)
    except (ValueError, OSError) as exc:  # UnicodeDecodeError is a ValueError
        raise config_error(f"{manifest}: {exc}") from None
    try:
        report = import_responses(file, recorded)
    except OSError as exc:
        raise config_error(f"batch output {file} cannot be read: {exc}") from None
    run_id = str(uuid.uuid4())
    from pipeline.trust.table import Trust

    trust = Trust.of(settings.calibration)
    outcomes = [*(_validated(o, page, trust) for o, page in zip(report.outcomes, recorded.pages.values(),
                                                                 strict=True)),
                *recorded.failures]
    try:
        summary = asyncio.run(store_import(out, run_id, file, recorded, report, outcomes, settings, wait=wait,
                                           on_wait=_say))
    except (OutputBusy, OutputUnreadable) as exc:  # one run writes OUT at a time; OUT damaged from outside
        raise config_error(str(exc)) from None
    skipped, shown_out = summary["skipped"], redact(str(out))  # folder names may hold document numbers
    typer.echo(f"run {run_id}: {summary['results']} results, {summary['failures']} failures, {skipped} skipped -> "
               f"{shown_out}; seen = results + failures + skipped: {'yes' if summary['accounted'] else 'NO'}")
    if skipped:
        typer.echo(f"{skipped} pages skipped: {shown_out} already has a result for them (import into another "
                   "folder to keep these answers too)")
    if report.unattributed_lines:
        typer.echo(f"{report.unattributed_lines} output lines matched no exported page (not JSON, or an unknown "
                   "custom_id); a page without a usable line is in the failure queue, retryable")
    if report.conflicting:  # document keys (content hashes), not document numbers
        shown = ", ".join(report.conflicting[:3]) + (" ..." if len(report.conflicting) > 3 else "")
        typer.echo(f"{len(report.conflicting)} pages have two different answers in {redact(file.name)}; the first "
                   f"line's was kept: {shown}")
    raise typer.Exit(0 if summary["accounted"] else 1)


def _validated(outcome: Extraction | Failure, prepared: PreparedImage, trust: Trust) -> Record | Failure:
    """The engine's validate stage for one imported answer; a bug there costs that page only, as in a run."""
    from pipeline.run.engine import finish, internal_failure

    try:
        return finish(outcome, prepared, trust)
    except Exception as exc:  # noqa: BLE001
        return internal_failure(prepared.ref, exc, outcome.backend)


def register(app: typer.Typer) -> None:
    """Add `batch` to the `idflow` app (called from idflow/cli.py)."""
    app.add_typer(batch_app, name="batch")
