"""The review page: one self-contained HTML file per run in OUT/review/ (inline CSS, thumbnails as data: URIs,
no scripts, no external assets), so it works offline and opens by double-click.

It holds personal data (names, full numbers, pictures) and is therefore written only inside OUT.
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, Template, select_autoescape

from pipeline.review.queue import ReviewQueue
from pipeline.review.summary import confidence_histogram
from pipeline.store.parquet import RUNS

REVIEW = "review"


@lru_cache(maxsize=1)
def _template() -> Template:
    env = Environment(loader=PackageLoader("pipeline.review", ""), autoescape=select_autoescape(["j2", "html"]))
    return env.get_template("page.html.j2")


OPEN_PAGE = "open"  # the page of everything still open in OUT, whichever run made it (run ids are UUIDs)


def page_path(out_dir: Path, run_id: str) -> Path:
    return out_dir / REVIEW / f"{run_id}.html"


def render_page(queue: ReviewQueue) -> str:
    reasons = queue.counts_by_reason().most_common()
    histogram = confidence_histogram(queue.confidences)
    return _template().render(
        q=queue, reasons=reasons, reasons_max=max((n for _, n in reasons), default=1),
        histogram=histogram, histogram_max=max((n for *_, n in histogram), default=0) or 1,
        made=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))


def write_page(queue: ReviewQueue) -> Path:
    """Write OUT/review/<run_id>.html (OUT/review/open.html for the whole folder) atomically (temp name + rename):
    a browser never sees half a page."""
    path = page_path(queue.out_dir, OPEN_PAGE if queue.whole_out else queue.run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(render_page(queue))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:  # a full disk: no half page left behind (the next run writes it, `owed_page`)
        with contextlib.suppress(OSError):  # the folder may be what failed
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.filename is None:  # a failed write names no file: say which
            exc.filename = str(path)
        raise
    return path


def owed_page(out_dir: Path, current_run: str) -> str | None:
    """The run before `current_run` whose review page is missing, or None. Why: a run whose documents are all
    stored can still stop while writing its page (OUT full); its documents are not read again, so the next run
    writes the page it owes. Only the latest earlier run that writes one (its summary names it, `PAGE_KEY`):
    a sharded parent or a retry writes none, and older pages are each run's own business."""
    for summary_file in sorted((out_dir / RUNS).glob("*.json"), key=_mtime, reverse=True):
        if summary_file.stem == current_run:
            continue
        try:
            summary = json.loads(summary_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if summary.get(PAGE_KEY):
            run = str(summary["run_id"])
            return run if not page_path(out_dir, run).exists() else None
    return None


PAGE_KEY = "review_page"  # in a run summary: the page (relative to OUT) the run writes after its summary


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
