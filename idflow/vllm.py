"""`idflow vllm up|status|down`: the local server pool, one `vllm serve` per GPU.

Thin: configuration checks and printing; the work is in `pipeline.vllm`. Progress and warnings go to stderr, so
`idflow vllm up --dry-run > launch.sh` captures the commands alone.
"""

from __future__ import annotations

import shutil
from typing import Annotated, Optional

import typer

from idflow.common import config_error, load_settings_pair

vllm_app = typer.Typer(no_args_is_help=True, help="Local vLLM servers, one per GPU, for `--backend vllm`.")


def _say(message: str) -> None:
    typer.echo(message, err=True)


_settings = load_settings_pair


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


def register(app: typer.Typer) -> None:
    """Add `vllm` to the `idflow` app (called from idflow/cli.py)."""
    app.add_typer(vllm_app, name="vllm")
