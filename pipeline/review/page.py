"""The review page: one self-contained HTML file per run in OUT/review/ (inline CSS, thumbnails as data: URIs,
no scripts, no external assets), so it works offline and opens by double-click.

It holds personal data (names, full numbers, pictures) and is therefore written only inside OUT.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path

from jinja2 import Environment, PackageLoader, Template, select_autoescape

from pipeline.review.queue import ReviewQueue
from pipeline.review.summary import confidence_histogram

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
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(render_page(queue))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path
