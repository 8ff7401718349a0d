"""`idflow review`: the review page of a run (and, with --interactive, corrections in the Prefect UI), plus
the corrections report that `idflow show` prints. Registered onto the `idflow` app by idflow/cli.py."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from idflow.common import config_error, console, stopped_by_signal
from pipeline.masking import mask_id, redact


def review(
    out: Annotated[Path, typer.Argument(help="output folder of a previous run")] = Path("out"),
    run: Annotated[Optional[str], typer.Option("--run", help="one run's page (default: what every run in OUT "
                                                             "left open)")] = None,
    interactive: Annotated[bool, typer.Option(
        help="ask for corrections in the Prefect UI (review flow; needs PREFECT_API_URL)")] = False,
    threshold: Annotated[Optional[float], typer.Option(
        min=0, max=1, help="auto-accept threshold (default IDFLOW_REVIEW_THRESHOLD, 0.95)")] = None,
    limit: Annotated[int, typer.Option(min=1, help="--interactive: documents asked about in this session")] = 20,
    reviewer: Annotated[str, typer.Option(envvar="IDFLOW_REVIEWER",
                                          help="--interactive: prefilled reviewer name")] = "",
) -> None:
    """Write OUT/review/open.html (or OUT/review/<run>.html with --run): every failure and low-confidence record
    not decided by a person yet, with pictures."""
    if not out.is_dir():
        raise config_error(f"output folder {out} does not exist")
    from pipeline.store.parquet import check_parts

    check_parts(out)  # a damaged OUT: one line (main prints it), not a failed review flow's traceback
    if interactive:
        from idflow.ops import _require_server

        _require_server()
        from flows.review import review as review_flow

        with stopped_by_signal("decisions saved so far are stored; the open questions were withdrawn"):
            result = asyncio.run(review_flow(out_dir=str(out.resolve()), run_id=run, threshold=threshold,
                                             limit=limit, reviewer=reviewer))
        console.print(f"review of run {result['run_id']}: " + ", ".join(
            f"{k} {v}" for k, v in result.items() if k not in ("run_id", "page")))
        console.print(f"review page: {result['page']}")
        return
    from pipeline.review.page import write_page
    from pipeline.review.queue import build_queue

    try:
        queue = build_queue(out, run, threshold=threshold, whole_out=run is None)
    except FileNotFoundError as exc:
        raise config_error(str(exc)) from None
    path = write_page(queue)
    console.print(f"{'all runs' if queue.whole_out else f'run {queue.run_id}'}: {len(queue.open_items)} documents "
                  f"need a person ({len(queue.items)} listed, threshold {queue.threshold:g})")
    for reason, n in Counter(i.reason for i in queue.open_items).most_common():  # what still needs a person
        console.print(f"  {reason}: {n}")
    console.print(f"review page: {path}")


def print_corrections(out: Path, limit: int = 20) -> None:
    """The documents people decided on (final: preferred by final_records, left alone by the retry)."""
    from pipeline.review.corrections import latest_corrections

    latest = latest_corrections(out)
    if not latest:
        return
    table = Table(title=f"corrected by a person ({len(latest)} documents, final; ID numbers masked)")
    for col in ("source path", "page", "decision", "who", "when", "doc type", "name", "id number", "expiry date"):
        table.add_column(col, overflow="fold")
    for row in sorted(latest.values(), key=lambda r: r["when"], reverse=True)[:limit]:
        # text people and file names chose: masked (a number inside a file name too) and never read as markup
        cells = (row["source_path"], row["page"], row["decision"], row["who"], row["when"].strftime("%Y-%m-%d %H:%M"),
                 row["doc_type_after"], row["name_after"], mask_id(row["id_number_after"]), row["expiry_date_after"])
        table.add_row(*("" if c is None else escape(redact(str(c))) for c in cells))
    console.print(table)


def register(app: typer.Typer) -> None:
    """Add `review` to the `idflow` app (called from idflow/cli.py)."""
    app.command()(review)
