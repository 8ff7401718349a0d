"""The `review` flow: the review page and summary artifacts of a run, then corrections asked for in the
Prefect UI, one document at a time (`pause_flow_run(wait_for_input=...)`: a RunInput form prefilled with what
the machine read).

Privacy: the picture and full values stay in the review page inside OUT. Prefect gets counts, masked numbers
and the link in artifacts; the form necessarily carries the prefilled and typed values, so the flow deletes
that run's stored inputs (schema, description, response) as soon as it has read the answer.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import httpx
from prefect import flow, get_client, get_run_logger
from prefect.artifacts import acreate_link_artifact, acreate_markdown_artifact
from prefect.exceptions import FlowPauseTimeout
from prefect.flow_runs import apause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run

from pipeline.masking import install_masking, mask_id
from pipeline.review.corrections import Correction, clean_values, correction_problems, decide, write_corrections
from pipeline.review.page import write_page
from pipeline.review.queue import ReviewItem, ReviewQueue, build_queue
from pipeline.review.summary import review_markdown

DocType = Literal["cn_id", "passport", "id_card", "visa", "unknown"]
Choice = Literal["save these values", "cannot be read", "skip for now", "stop reviewing"]
POLL_S = 2  # how often the paused flow asks the server whether it was resumed


class DocumentReview(RunInput):
    """The form shown in the Prefect UI for one document (every field prefilled with the machine's reading)."""

    decision: Choice = "save these values"
    doc_type: DocType = "unknown"
    name: str = ""
    id_number: str = ""
    expiry_date: str = ""
    reviewer: str = ""


async def publish_review(out: Path, run_id: str | None = None, threshold: float | None = None
                         ) -> tuple[ReviewQueue, Path]:
    """Write the run's review page into OUT/review/ and link it, with a summary, from the current flow run's
    artifacts (counts, histogram, masked numbers; no pictures or names)."""
    queue = await asyncio.to_thread(build_queue, out, run_id, threshold=threshold)
    page = await asyncio.to_thread(write_page, queue)
    uri = page.resolve().as_uri()
    await acreate_link_artifact(uri, link_text=f"review page: {len(queue.open_items)} documents need a person",
                                key="idflow-review-page", description="idflow review page (inside OUT)")
    await acreate_markdown_artifact(review_markdown(queue, uri), key="idflow-review-summary",
                                    description="what needs a person: counts by reason, confidence histogram")
    return queue, page


def _run_name() -> str:
    return f"review run {flow_run.parameters.get('run_id') or 'latest'}"


@flow(name="review", flow_run_name=_run_name, log_prints=False)
async def review(out_dir: str, run_id: str | None = None, threshold: float | None = None, limit: int = 20,
                 reviewer: str = "", timeout_s: int = 24 * 3600) -> dict[str, Any]:
    """Publish the review page of `run_id` (default: the latest extract run in `out_dir`), then ask for a
    decision on up to `limit` open documents, most in need first. Each answer is validated like machine output;
    a refused one is asked again with the reason. Waits at most `timeout_s` per question."""
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    out = Path(out_dir)
    queue, page = await publish_review(out, run_id, threshold)
    todo = [item for item in queue.open_items if item.key is not None][:limit]
    logger.info("%d documents to review: answer each question on this flow run's page in the Prefect UI",
                len(todo))
    outcomes: Counter[str] = Counter()
    for number, item in enumerate(todo, 1):
        outcome = await _ask(out, queue, item, page, number, len(todo), reviewer, timeout_s)
        outcomes[outcome] += 1
        if outcome in ("stopped", "timed out"):
            break
    if any(o in ("corrected", "confirmed", "cannot be read") for o in outcomes):
        await asyncio.to_thread(write_page, await asyncio.to_thread(build_queue, out, queue.run_id,
                                                                    threshold=queue.threshold))
    result = {"run_id": queue.run_id, "page": str(page), "asked": len(todo), **outcomes}
    logger.info("review of run %s: %s", queue.run_id, dict(outcomes))
    return result


async def _ask(out: Path, queue: ReviewQueue, item: ReviewItem, page: Path, number: int, total: int,
               reviewer: str, timeout_s: int) -> str:
    """Ask until a valid decision (or skip/stop); store it. Returns the outcome."""
    logger = get_run_logger()
    before = item.machine_values()
    values, who, problems = dict(before), reviewer, []
    while True:
        form = DocumentReview.with_initial_data(
            description=_describe(item, page, number, total, problems, values),
            doc_type=values["doc_type"] or "unknown", name=values["name"] or "",
            id_number=values["id_number"] or "", expiry_date=values["expiry_date"] or "", reviewer=who)
        try:
            answer = await apause_flow_run(wait_for_input=form, timeout=timeout_s, poll_interval=POLL_S)
        except FlowPauseTimeout:
            return "timed out"
        await _forget(answer)
        if answer.decision == "skip for now":
            return "skipped"
        if answer.decision == "stop reviewing":
            return "stopped"
        who = answer.reviewer.strip()
        unreadable = answer.decision == "cannot be read"
        values = dict.fromkeys(before) if unreadable else clean_values(answer.model_dump())
        problems = [] if unreadable else [_redact(p, values) for p in correction_problems(values, item.orientation)]
        if not who:
            problems.insert(0, "reviewer: say who you are (it is stored with the correction)")
        if problems:
            logger.info("document %d of %d: answer refused: %s", number, total, "; ".join(problems))
            continue
        decision = "cannot be read" if unreadable else decide(before, values)
        assert item.sha256 is not None
        await asyncio.to_thread(write_corrections, out, [Correction(
            sha256=item.sha256, page=item.page or 0, source_path=item.source_path, run_id=queue.run_id, who=who,
            decision=decision, before=before, after=values)])
        logger.info("document %d of %d: %s by a person", number, total, decision)
        return decision


def _redact(problem: str, values: dict[str, str | None]) -> str:
    """A refusal reason without the typed name and number (JSON Schema messages quote values with repr)."""
    for name, masked in (("name", "<name>"), ("id_number", mask_id(values.get("id_number")))):
        if values.get(name):
            problem = problem.replace(repr(values[name]), repr(masked))
    return problem


def _describe(item: ReviewItem, page: Path, number: int, total: int, problems: list[str],
              values: dict[str, str | None]) -> str:
    """The markdown above the form: why the document is here, the link to its picture, refusals. Numbers
    masked; the picture is on the review page (inside OUT), not in Prefect."""
    link = f"{page.resolve().as_uri()}#{item.anchor}"
    lines = [f"### Document {number} of {total}: `{item.reason}`", "", item.reason_text, ""]
    if item.confidence is not None:
        name, view = min(((n, f) for n, f in item.fields.items() if f.confidence is not None),
                         key=lambda nf: nf[1].confidence or 0.0)
        lines.append(f"- least sure field: {name.replace('_', ' ')} ({view.state}, confidence {item.confidence:.3f})")
    if item.check_failures:
        lines.append(f"- failed checks: {', '.join(item.check_failures)}")
    if values.get("id_number"):
        lines.append(f"- number in the form: `{mask_id(values['id_number'])}`")
    lines += [f"- document `{(item.sha256 or '')[:12]}` page {(item.page or 0) + 1}", "",
              f"Picture and everything read: [review page]({link}) (open `{page.resolve()}` in a browser; "
              "it stays inside the output folder).", ""]
    if problems:
        lines += ["**Refused, please fix:**", "", *[f"- {p}" for p in problems], ""]
    lines += ["Correct the fields to what the page shows (empty = not on the page; expiry `YYYY-MM-DD` or "
              "`long-term`), keep **save these values** and submit. Or choose **cannot be read**, **skip for "
              "now**, or **stop reviewing**. Your name goes in *reviewer*."]
    return "\n".join(lines)


async def _forget(answer: RunInput) -> None:
    """Delete this pause's stored inputs (they hold the prefilled and typed values) once read."""
    base = answer.metadata.key.removesuffix("-response")
    async with get_client() as client:
        for suffix in ("schema", "description", "response"):
            try:
                await client.delete_flow_run_input(answer.metadata.receiver, f"{base}-{suffix}")
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code != 404:  # 404: nothing stored under that key
                    raise
