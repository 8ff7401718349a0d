"""`idflow retry OUT`: the `retry-failures` flow from the command line, registered onto the `idflow` app."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from idflow.common import (
    config_error,
    console,
    engine_errors_to_log,
    holding_output,
    load_settings,
    prefect_api,
    refuse_unless_free,
)
from pipeline.extract.registry import BACKEND_NAMES, choices


def retry(
    out: Annotated[Path, typer.Argument(help="output folder whose failure queue to retry")],
    backend: Annotated[Optional[str], typer.Option(
        help=f"{choices(BACKEND_NAMES)} [default: the configured one], whatever backend recorded the failures")] = None,
    max_attempts: Annotated[int, typer.Option(help="failed attempts per document at most, the first run "
                                                   "included (internal errors: 2)")] = 3,
    wait: Annotated[bool, typer.Option(help="wait for a run writing OUT instead of refusing (exit 2)")] = False,
    debug: Annotated[bool, typer.Option(help="print the traceback of a retry that cannot go on (always in the "
                                             "error log of the Prefect home)")] = False,
) -> None:
    """Retry the failure queue's open entries that may succeed on another try (request errors, endpoint down,
    internal errors once). Exit 0 when the retry ran, 2 when OUT is busy or the configuration is wrong."""
    from rich.table import Table

    from pipeline.store.parquet import check_parts

    if not (out / "failures").is_dir():
        raise config_error(f"no failure queue in {out}")
    check_parts(out)  # a damaged OUT: one line here (main prints it), not a failed flow's traceback
    refuse_unless_free(out, wait=wait, debug=debug)  # the line OUT's lock gives, without starting Prefect
    settings = load_settings(backend=backend)
    with prefect_api(settings) as ready:
        from flows.retry import retry_failures

        ready()

        async def retried() -> dict:
            with engine_errors_to_log(debug=debug):
                return await retry_failures(str(out), backend=settings.backend, max_attempts=max_attempts,
                                            wait_for_lock=wait)

        report = holding_output(out, retried, wait=wait, debug=debug,
                                what_now="documents retried so far are stored; run the same command again")
    table = Table(title=f"retry {report['run_id']} ({report['backend']})")
    table.add_column("outcome")
    table.add_column("documents", justify="right")
    for label, key in (("resolved by this run", "resolved"), ("resolved earlier by another run",
                                                              "resolved_elsewhere"),
                       ("out of attempts", "exhausted"), ("not retryable: for a person", "for_a_person"),
                       ("source file missing or changed", "missing")):
        table.add_row(label, str(report[key]))
    for reason, n in sorted(report["still_failing"].items()):
        table.add_row(f"still failing: {reason}", str(n))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add `retry` to the `idflow` app (called from idflow/cli.py)."""
    app.command()(retry)
