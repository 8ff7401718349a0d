"""`idflow vllm up|status|down` (the local server pool) and `idflow batch export|import` (offline batch files).

Thin: configuration checks and printing; the work is in `pipeline.vllm` and `pipeline.batch_files`. Progress
and warnings go to stderr, so `idflow vllm up --dry-run > launch.sh` captures the commands alone.
"""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from pydantic import ValidationError

from pipeline.cli_common import config_error
from pipeline.config import Settings
from pipeline.datamodel import Failure, PreparedImage, Record, Skipped
from pipeline.vllm.settings import VllmSettings

if TYPE_CHECKING:
    from pipeline.batch_files import BatchManifest, ImportReport
    from pipeline.datamodel import Extraction

vllm_app = typer.Typer(no_args_is_help=True, help="Local vLLM servers, one per GPU, for `--backend vllm`.")
batch_app = typer.Typer(no_args_is_help=True, help="OpenAI Batch JSONL files for `vllm run-batch` or a batch API.")


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _settings() -> tuple[Settings, VllmSettings]:
    try:
        return Settings(), VllmSettings()
    except ValidationError as exc:  # str(exc) would echo the values, the key among them
        from pipeline.cli import settings_problems

        raise config_error(settings_problems(exc)) from None


# -- vllm -------------------------------------------------------------------------------------------------

@vllm_app.command()
def up(
    model: Annotated[str, typer.Option("--model", help="model path or hub id, e.g. Qwen/Qwen3.5-2B")],
    gpus: Annotated[str, typer.Option(help="comma-separated GPU ids: one server per GPU")] = "0",
    port_base: Annotated[Optional[int], typer.Option(help="port of the first server; the next count up "
                                                          "[default: IDFLOW_VLLM_PORT_BASE, 8004]")] = None,
    served_model_name: Annotated[Optional[str], typer.Option(help="model id clients send [default: the last "
                                                                  "part of --model]")] = None,
    dry_run: Annotated[bool, typer.Option(help="print the commands and exit")] = False,
) -> None:
    """Start one `vllm serve` per GPU with limits derived from the pipeline's image budget; wait until each
    answers a real request; write the pool file that `--backend vllm` reads."""
    from pipeline.vllm import launcher
    from pipeline.vllm.command import plan, read_help

    settings, vllm = _settings()
    gpu_ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not gpu_ids:
        raise config_error("--gpus lists no GPU")
    installed = shutil.which(vllm.serve_argv[0]) is not None
    help_text = read_help(vllm.serve_argv) if installed else None
    commands = plan(model, gpu_ids, vllm, settings.prepare, max_tokens=settings.openai.max_tokens,
                    served_model_name=served_model_name, port_base=port_base, help_text=help_text)
    if not commands.checked:
        _say(f"warning: could not run `{vllm.serve_command} --help=all`: flags not checked against the installed "
             "vLLM")
    for flag in commands.dropped:
        _say(f"warning: the installed vLLM does not know {flag}: dropped")
    if dry_run:
        for spec in commands.specs:
            typer.echo(spec.render() + "\n")
        return
    if not installed:
        raise config_error(f"`{vllm.serve_argv[0]}` not found: pip install 'idflow[vllm]' on the GPU host, or "
                           "set IDFLOW_VLLM_SERVE_COMMAND")
    if vllm.api_key is None:
        raise config_error("IDFLOW_VLLM_API_KEY is not set: choose a key (e.g. `python -c 'import secrets; "
                           "print(secrets.token_urlsafe(24))'`) and export it here and where the pipeline runs")
    served = commands.served_model_name
    try:
        result = launcher.up(commands.specs, state_dir=vllm.state_dir, api_key=vllm.api_key.get_secret_value(),
                             model=served, max_pixels=settings.prepare.max_pixels, patch=settings.prepare.patch,
                             startup_timeout_s=vllm.startup_timeout_s, stall_after_s=vllm.stall_after_s,
                             stop_timeout_s=vllm.stop_timeout_s, report=_say)
    except launcher.LaunchError as exc:
        raise config_error(str(exc)) from None
    for name, why in result.failed.items():
        _say(f"{name}: FAILED: {why}")
    if not result.ready:
        raise typer.Exit(1)
    typer.echo(f"{len(result.ready)}/{len(commands.specs)} servers ready; pool file {vllm.pool_file}")
    typer.echo(f"use them: idflow run INPUT --backend vllm (IDFLOW_VLLM_MODEL={served}, key from "
               "IDFLOW_VLLM_API_KEY)")
    raise typer.Exit(0 if not result.failed else 1)


@vllm_app.command()
def status() -> None:
    """Each server started by `up`: process, /health, requests running/waiting, and the last pool run's
    served/failed counts. Exit 1 unless every server is up and healthy."""
    from rich.console import Console
    from rich.table import Table

    from pipeline.vllm import launcher

    _, vllm = _settings()
    rows = launcher.status(vllm.state_dir)
    if not rows:
        _say(f"no servers started from {vllm.state_dir} (see `idflow vllm up`)")
        raise typer.Exit(1)
    table = Table(title=f"vLLM pool ({vllm.state_dir})")
    for column in ("server", "pid", "endpoint", "state", "run/wait", "served/fail/eject"):
        table.add_column(column, no_wrap=column == "endpoint")
    for row in rows:
        state = "stopped" if not row.running else "ok" if row.healthy else "unhealthy"
        load = "-" if row.requests_running is None else f"{row.requests_running:g}/{row.requests_waiting or 0:g}"
        counts = "-" if row.pool is None else "/".join(str(row.pool[k]) for k in ("served", "failures", "ejections"))
        table.add_row(row.name, str(row.pid), row.base_url, state, load, counts)
    Console().print(table)
    raise typer.Exit(0 if all(r.running and r.healthy for r in rows) else 1)


@vllm_app.command()
def down() -> None:
    """Stop the servers `up` started (only those, from the pid file): SIGTERM, then SIGKILL after
    IDFLOW_VLLM_STOP_TIMEOUT_S."""
    from pipeline.vllm import launcher

    _, vllm = _settings()
    stopped = launcher.down(vllm.state_dir, vllm.stop_timeout_s, report=typer.echo)
    if not stopped:
        typer.echo(f"no servers started from {vllm.state_dir}")


# -- batch ------------------------------------------------------------------------------------------------

@batch_app.command("export")
def export(
    input_dir: Annotated[Path, typer.Argument(help="folder of scans (searched recursively)")],
    file: Annotated[Path, typer.Argument(help="requests file to write (.jsonl); the manifest goes beside it")],
    model: Annotated[Optional[str], typer.Option(help="model id for the requests [default: TAOTOKEN_MODEL, "
                                                      "else IDFLOW_VLLM_MODEL]")] = None,
) -> None:
    """Prepare every page under INPUT_DIR and write one chat request per page in the OpenAI Batch format."""
    from pipeline.batch_files import export_requests

    settings, vllm = _settings()
    if not input_dir.is_dir():
        raise config_error(f"input folder {input_dir} does not exist or is not a folder")
    model = model or settings.openai.model or vllm.model
    if not model:
        raise config_error("no model id: pass --model (the served model name for `vllm run-batch`)")
    # The batch request is the OpenAI-compatible backend's request, so results carry that fingerprint.
    fingerprint = settings.model_copy(update={
        "backend": "openai", "openai": settings.openai.model_copy(update={"model": model})}).fingerprint()
    summary = asyncio.run(export_requests(_prepared_pages(input_dir, settings), file, request=settings.openai,
                                          model=model, fingerprint=fingerprint))
    typer.echo(f"{summary.requests} requests -> {summary.requests_path}; {summary.failures} pages failed before "
               f"a request (recorded in {summary.manifest_path})")


async def _prepared_pages(input_dir: Path, settings: Settings) -> AsyncIterator[PreparedImage | Failure]:
    """The engine's prepare stage over the folder (every core); skips (hidden, duplicates) have nothing to export."""
    from pipeline.backends.factory import make_backend
    from pipeline.engine import Engine
    from pipeline.ingest import Discovery

    async with Engine(settings, make_backend(settings, "ocr")) as engine:
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
    from pipeline.batch_files import find_manifest, import_responses, read_manifest
    from pipeline.masking import redact
    from pipeline.output_lock import OutputBusy
    from pipeline.store import OutputUnreadable

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
    outcomes = [*(_validated(o, page) for o, page in zip(report.outcomes, recorded.pages.values(), strict=True)),
                *recorded.failures]
    try:
        summary = asyncio.run(_store_import(out, run_id, file, recorded, report, outcomes, settings, wait=wait))
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


def _validated(outcome: Extraction | Failure, prepared: PreparedImage) -> Record | Failure:
    """The engine's validate stage for one imported answer; a bug there costs that page only, as in a run."""
    from pipeline.engine import finish, internal_failure

    try:
        return finish(outcome, prepared)
    except Exception as exc:  # noqa: BLE001
        return internal_failure(prepared.ref, exc, outcome.backend)


async def _store_import(out: Path, run_id: str, file: Path, recorded: BatchManifest, report: ImportReport,
                        outcomes: list[Record | Failure], settings: Settings, *, wait: bool) -> dict[str, Any]:
    """Write the imported outcomes under OUT's lock and return the run summary, written with a run's accounting
    (`seen = results + failures + skipped`) and naming the exported folder so the retry can find failed
    documents again.

    What is already done is read under the lock, as a run does. A page counts as done, and is skipped as
    `already_done` (neither its answer nor its failure stored), when OUT holds a result for it made by *any*
    run, not only one with the import's fingerprint. Why: an import does not extract anything; it can only add
    a second, competing row for a document that already has one, and the usual way there is the same model read
    the page live (`--backend vllm` has another fingerprint than the export's, which says `openai`) or the same
    output imported twice. Skipping is visible (the import says how many, and why) and undone by importing the
    file into another folder; a second row is silent and undone only by editing Parquet parts. Pages that only
    failed before are not done: their new outcome is stored, as a run tries failures again, unless a person has
    decided on them (final)."""
    from pipeline.datamodel import SkipReason
    from pipeline.output_lock import hold_output
    from pipeline.review.corrections import not_to_read_again
    from pipeline.store import RunWriter, write_run_summary
    from pipeline.tally import RunTally

    writer = RunWriter(out, run_id, recorded.fingerprint, flush_every=settings.flush_every)
    tally = RunTally()
    async with hold_output(out, run_id=run_id, wait=wait, on_wait=_say):
        # a result by any run (OutputUnreadable when a part is damaged); a person's decision is final
        done = set(not_to_read_again(out, None))
        try:
            for outcome in outcomes:
                tally.seen += 1
                rel_path, sha256, page = _identity(outcome)
                key = f"{sha256}:{page}"
                if sha256 is not None and key in done:
                    outcome = Skipped(rel_path, SkipReason.ALREADY_DONE, sha256, page)
                elif isinstance(outcome, Record):
                    done.add(key)
                writer.add(outcome)
                tally.add(outcome)
        finally:
            writer.flush()
        for failure in writer.demoted:
            tally.demote(failure)
        # The summary as a run of the export's request would have it (model, prices), then what is the import's.
        as_run = settings.model_copy(update={"backend": "openai", "openai": settings.openai.model_copy(
            update={"model": recorded.model})})
        summary = tally.summary(run_id=run_id, settings=as_run)
        summary.update({"backend": "batch", "fingerprint": recorded.fingerprint,
                        "source_dir": _export_root(recorded), "out_dir": str(out), "batch_output": str(file),
                        "unattributed_lines": report.unattributed_lines, "duplicate_lines": report.duplicate_lines,
                        "conflicting_answers": len(report.conflicting)})
        write_run_summary(out, summary)
    return summary


def _identity(outcome: Record | Failure) -> tuple[str, str | None, int | None]:
    """(relative path, sha256, page) of an outcome: its document key is `sha256:page` (none without a hash)."""
    if isinstance(outcome, Record):
        ref = outcome.extraction.ref
        return ref.rel_path, ref.sha256, ref.page
    return outcome.rel_path, outcome.sha256, outcome.page


def _export_root(recorded: BatchManifest) -> str | None:
    """The folder the export read (a page's path minus its relative path), for locating failed files later."""
    for page in recorded.pages.values():
        path, rel = str(page.ref.path), page.ref.rel_path
        if path.endswith(rel):
            return path[: len(path) - len(rel)].rstrip("/") or "/"
    return None


def register(app: typer.Typer) -> None:
    """Add `vllm` and `batch` to the `idflow` app (called from pipeline/cli.py)."""
    app.add_typer(vllm_app, name="vllm")
    app.add_typer(batch_app, name="batch")
