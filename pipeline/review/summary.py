"""The review summary for Prefect artifacts: counts by reason and a confidence histogram, no personal data.

Markdown only (tables with text bars): the Prefect UI renders it, and an image artifact would need a URL the
UI can fetch, which a file inside OUT is not.
"""

from __future__ import annotations

from pipeline.masking import mask_id
from pipeline.review.queue import REASON_TEXT, ReviewQueue

BAR_WIDTH = 30


def confidence_histogram(confidences: list[float], bins: int = 10) -> list[tuple[float, float, int]]:
    """(low, high, records) per equal-width bin over [0, 1]; 1.0 falls in the last bin."""
    counts = [0] * bins
    for c in confidences:
        counts[min(bins - 1, max(0, int(c * bins)))] += 1
    return [(i / bins, (i + 1) / bins, n) for i, n in enumerate(counts)]


def _bar(n: int, most: int) -> str:
    return "█" * (round(BAR_WIDTH * n / most) if most else 0) or ("▏" if n else "")


def review_markdown(queue: ReviewQueue, page_uri: str) -> str:
    """Counts by reason, the histogram and the link; the only per-document values are masked numbers."""
    reasons = queue.counts_by_reason()
    lines = [f"# idflow review of run `{queue.run_id}`", "",
             f"- needs a person: **{len(queue.open_items)}** of {len(queue.items)} listed "
             f"({sum(1 for i in queue.items if i.kind == 'failure')} failures, "
             f"{sum(1 for i in queue.items if i.kind == 'low_confidence')} records below the auto-accept "
             f"threshold {queue.threshold:g}, {sum(1 for i in queue.items if i.kind == 'conflict')} records whose "
             f"number another document shows with other values); already settled: "
             f"{len(queue.items) - len(queue.open_items)}",
             f"- review page (inside the output folder, personal data): [{page_uri}]({page_uri})", ""]
    if reasons:
        most = max(reasons.values())
        lines += ["## By reason", "", "| reason | documents | | what it means |", "|---|---:|---|---|"]
        lines += [f"| `{r}` | {n} | {_bar(n, most)} | {REASON_TEXT.get(r, r)} |" for r, n in reasons.most_common()]
        lines.append("")
    histogram = confidence_histogram(queue.confidences)
    most = max((n for *_, n in histogram), default=0)
    lines += [f"## Record confidence (least sure field) of the run's {queue.results} records", "",
              "| confidence | records | |", "|---|---:|---|"]
    lines += [f"| {lo:.1f}–{hi:.1f}{' ⚑' if lo < queue.threshold else ''} | {n} | {_bar(n, most)} |"
              for lo, hi, n in histogram]
    lines += ["", "⚑ = below the auto-accept threshold (at least partly)", ""]
    numbers = [(i.reason, mask_id(i.fields["id_number"].value))
               for i in queue.open_items if i.fields["id_number"].value]
    if numbers:
        lines += ["## Open documents with a number read (masked)", "", "| reason | number |", "|---|---|"]
        lines += [f"| `{r}` | `{n}` |" for r, n in numbers[:50]]
    return "\n".join(lines)
