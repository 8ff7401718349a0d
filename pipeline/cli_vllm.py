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
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from pydantic import ValidationError

from pipeline.cli_common import config_error
from pipeline.config import Settings
from pipeline.datamodel import Failure, PreparedImage, Record, Skipped
from pipeline.vllm.settings import VllmSettings

if TYPE_CHECKING:
    from pipeline.batch_files import BatchManifest

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
    """Parse and validate every answer; write results and the failure queue as a run would."""
    from pipeline.batch_files import find_manifest, import_responses, read_manifest
    from pipeline.datamodel import Extraction
    from pipeline.engine import finish
    from pipeline.output_lock import OutputBusy

    settings, _ = _settings()
    if not file.is_file():
        raise config_error(f"batch output {file} not found")
    manifest = manifest or find_manifest(file)
    if manifest is None:
        raise config_error(f"no single *.manifest.jsonl beside {file}: pass --manifest")
    try:
        recorded = read_manifest(manifest)
    except (ValueError, KeyError) as exc:
        raise config_error(f"{manifest}: {exc}") from None
    report = import_responses(file, recorded)
    run_id = str(uuid.uuid4())
    outcomes = [finish(o, recorded.pages[o.ref.key]) if isinstance(o, Extraction) else o
                for o in report.outcomes]
    try:
        demoted = asyncio.run(_store_import(out, run_id, recorded, [*outcomes, *recorded.failures],
                                            flush_every=settings.flush_every, wait=wait))
    except OutputBusy as exc:
        raise config_error(str(exc)) from None
    results = sum(isinstance(o, Record) for o in outcomes) - demoted
    typer.echo(f"run {run_id}: {results} results, {len(outcomes) + len(recorded.failures) - results} failures "
               f"-> {out}" + (f"; {report.unattributed_lines} output lines matched no exported page"
                             if report.unattributed_lines else ""))


async def _store_import(out: Path, run_id: str, recorded: BatchManifest, outcomes: list[Record | Failure], *,
                        flush_every: int, wait: bool) -> int:
    """Write the imported outcomes under OUT's lock, with a run summary naming the exported folder so the retry
    can find failed documents again. Returns how many results were stored as failures instead."""
    from pipeline.output_lock import hold_output
    from pipeline.store import RunWriter, write_run_summary

    writer = RunWriter(out, run_id, recorded.fingerprint, flush_every=flush_every)
    async with hold_output(out, run_id=run_id, wait=wait, on_wait=_say):
        for outcome in outcomes:
            writer.add(outcome)
        writer.flush()
        write_run_summary(out, {"run_id": run_id, "backend": "batch", "fingerprint": recorded.fingerprint,
                                "source_dir": _export_root(recorded), "out_dir": str(out)})
    return len(writer.demoted)


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
