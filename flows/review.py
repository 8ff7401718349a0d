"""The `review` flow: the review page and summary artifacts of a run, then corrections asked for in the
Prefect UI, one document at a time (`pause_flow_run(wait_for_input=...)`: a RunInput form prefilled with what
the machine read).

Privacy: the picture and full values stay in the review page inside OUT. Prefect gets counts, masked numbers
and the link in artifacts; the form necessarily carries the prefilled and typed values, so the flow deletes
that pause's stored inputs (schema, description, response: the flow run's `paused-*` inputs) however the
question ends:

- answered, timed out, failed or cancelled (asyncio): a `finally` around the pause deletes them, with blocking
  calls so a cancelled task cannot interrupt the deletion;
- cancelled in the Prefect UI while paused: a watcher beside the pause sees the run `Cancelling`, ends the
  pause (the `finally` deletes) and the session; the `on_cancellation` hook moves the run to `Cancelled`;
- SIGTERM (`kill`, a worker or runner stopping the run): Prefect turns it into a crash of the flow run, the
  pause is cancelled and its `finally` deletes; the `on_crashed` / `on_cancellation` hooks delete again
  (they also run in a runner's process when the runner had to kill the flow's process);
- SIGKILL, OOM kill or power loss cannot be handled by the dying process: the inputs stay until the next
  `review` flow starts. Every review flow starts by deleting the leftover `paused-*` inputs of review runs that
  ended (`Crashed`, `Cancelled`, `Cancelling`, `Failed`) or whose pause deadline has passed; and of review runs
  of the same OUT whose process is gone, told by the session lock each interactive session holds on
  `OUT/review/.session-<flow run id>.lock` (the kernel releases it when the process dies, however it dies;
  such a run is marked `Crashed`). POSIX only: without `fcntl` (Windows) only the first two rules apply.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from uuid import UUID

import httpx
from prefect import flow, get_client, get_run_logger
from prefect.artifacts import acreate_link_artifact, acreate_markdown_artifact
from prefect.client.schemas.filters import (FlowFilter, FlowFilterName, FlowRunFilter, FlowRunFilterState,
                                            FlowRunFilterStateType)
from prefect.client.schemas.objects import StateType
from prefect.client.schemas.sorting import FlowRunSort
from prefect.exceptions import FlowPauseTimeout, ObjectNotFound
from prefect.flow_runs import apause_flow_run
from prefect.input import RunInput
from prefect.runtime import flow_run
from prefect.states import Cancelled, Crashed

from flows.sigterm import stops_on_sigterm
from pipeline.masking import install_masking, mask_id, redact
from pipeline.review.corrections import Correction, clean_values, correction_problems, decide, write_corrections
from pipeline.review.page import REVIEW, write_page
from pipeline.review.queue import ReviewItem, ReviewQueue, build_queue
from pipeline.review.summary import review_markdown
from pipeline.review.thumbnails import RunThumbnails
from pipeline.validate import schema

try:
    import fcntl
except ImportError:  # Windows: no session locks (see the module docstring)
    fcntl = None  # type: ignore[assignment]

FLOW_NAME = "review"
# The choices of the form's document type: the schema's (one source of truth), so every type the machine can
# store can be confirmed by a person.
DOC_TYPES: tuple[str, ...] = tuple(schema()["properties"]["doc_type"]["enum"])
DocType = Literal[DOC_TYPES]  # type: ignore[valid-type]
assert "unknown" in DOC_TYPES  # the form's default
Choice = Literal["save these values", "cannot be read", "skip for now", "stop reviewing"]
POLL_S = 2  # how often the paused flow asks the server whether it was resumed (or cancelled)
PAUSE_INPUTS = "paused-"  # prefix of the inputs Prefect stores for a pause: paused-<n>-schema|description|response
SESSION_LOCK = ".session-"  # OUT/review/.session-<flow run id>.lock, held while a session runs
# Review runs that may hold leftover pause inputs; Completed ones deleted theirs on the way (see `_ask`).
_SWEPT_STATES = [StateType.PAUSED, StateType.CANCELLING, StateType.CANCELLED, StateType.CRASHED,
                 StateType.FAILED]


class DocumentReview(RunInput):
    """The form shown in the Prefect UI for one document (every field prefilled with the machine's reading)."""

    decision: Choice = "save these values"
    doc_type: DocType = "unknown"
    name: str = ""
    id_number: str = ""
    expiry_date: str = ""
    reviewer: str = ""


async def publish_review(out: Path, run_id: str | None = None, threshold: float | None = None,
                         made: RunThumbnails | None = None) -> tuple[ReviewQueue, Path]:
    """Write the run's review page into OUT/review/ and link it, with a summary, from the current flow run's
    artifacts (counts, histogram, masked numbers; no pictures or names); `made`: the thumbnails the run made."""
    queue = await asyncio.to_thread(build_queue, out, run_id, threshold=threshold, whole_out=run_id is None,
                                    made=made)
    page = await asyncio.to_thread(write_page, queue)
    uri = page.resolve().as_uri()
    await acreate_link_artifact(uri, link_text=f"review page: {len(queue.open_items)} documents need a person",
                                key="idflow-review-page", description="idflow review page (inside OUT)")
    await acreate_markdown_artifact(review_markdown(queue, uri), key="idflow-review-summary",
                                    description="what needs a person: counts by reason, confidence histogram")
    return queue, page


def _run_name() -> str:
    return f"review run {flow_run.parameters.get('run_id') or 'all open'}"


def _forget_on_exit(flow: Any, run: Any, state: Any) -> None:
    """State hook (on_crashed, on_cancellation; in the flow's process or a runner's): delete the run's pause
    inputs; a run cancelled while paused outside a runner is left `Cancelling` by the engine: finish it."""
    forget_pauses(run.id)
    if state.is_cancelling():
        with get_client(sync_client=True) as client:
            if client.read_flow_run(run.id).state.is_cancelling():
                client.set_flow_run_state(run.id, Cancelled(message="cancelled while asking for a review"),
                                          force=True)


@flow(name=FLOW_NAME, flow_run_name=_run_name, log_prints=False, on_crashed=[_forget_on_exit],
      on_cancellation=[_forget_on_exit])
@stops_on_sigterm
async def review(out_dir: str, run_id: str | None = None, threshold: float | None = None, limit: int = 20,
                 reviewer: str = "", timeout_s: int = 24 * 3600) -> dict[str, Any]:
    """Publish the review page of `run_id` (default: what every run in `out_dir` left open), then ask for a
    decision on up to `limit` open documents, most in need first. Each answer is validated like machine output;
    a refused one is asked again with the reason. Waits at most `timeout_s` per question.

    First deletes what earlier review sessions left in Prefect (`sweep_leftovers`: a SIGKILLed session cannot
    delete its own form). Each pause's inputs are deleted however the question ends (see the module docstring)."""
    install_masking("prefect", "prefect.flow_runs", "prefect.task_runs")
    logger = get_run_logger()
    out = Path(out_dir)
    this_run = UUID(str(flow_run.id))
    try:
        swept = await sweep_leftovers(out, this_run)
    except (httpx.HTTPError, OSError) as exc:  # a session still works; the next one sweeps again
        logger.warning("could not delete the inputs earlier review sessions left: %s", exc)
    else:
        if swept:
            logger.info("deleted %d stored inputs earlier review sessions left", swept)
    queue, page = await publish_review(out, run_id, threshold)
    todo = [item for item in queue.open_items if item.key is not None][:limit]
    logger.info("%d documents to review: answer each question on this flow run's page in the Prefect UI",
                len(todo))
    outcomes: Counter[str] = Counter()
    with _session_lock(out, this_run):
        for number, item in enumerate(todo, 1):
            outcome = await _ask(out, queue, item, page, number, len(todo), reviewer, timeout_s, this_run)
            outcomes[outcome] += 1
            if outcome in ("stopped", "timed out", "cancelled"):
                break
    if any(o in ("corrected", "confirmed", "cannot be read") for o in outcomes):
        again = await asyncio.to_thread(build_queue, out, run_id, threshold=queue.threshold,
                                        whole_out=queue.whole_out)
        await asyncio.to_thread(write_page, again)
    result = {"run_id": queue.run_id, "page": str(page), "asked": len(todo), **outcomes}
    logger.info("review of run %s: %s", queue.run_id, dict(outcomes))
    return result


async def _ask(out: Path, queue: ReviewQueue, item: ReviewItem, page: Path, number: int, total: int,
               reviewer: str, timeout_s: int, this_run: UUID) -> str:
    """Ask until a valid decision (or skip/stop); store it. Returns the outcome."""
    logger = get_run_logger()
    before = item.machine_values()
    values, who, problems = dict(before), reviewer, []
    while True:
        doc_type = values["doc_type"] if values["doc_type"] in DOC_TYPES else "unknown"
        form = DocumentReview.with_initial_data(
            description=_describe(item, page, number, total, problems, values),
            doc_type=doc_type, name=values["name"] or "", id_number=values["id_number"] or "",
            expiry_date=values["expiry_date"] or "", reviewer=who)
        try:
            answer = await _pause(form, timeout_s, this_run)
        except FlowPauseTimeout:
            return "timed out"
        finally:  # whatever ended the question: its form (prefilled values), description and answer go
            forget_pauses(this_run)
        if answer is None:
            logger.info("document %d of %d: the review was cancelled", number, total)
            return "cancelled"
        if answer.decision == "skip for now":
            return "skipped"
        if answer.decision == "stop reviewing":
            return "stopped"
        who = answer.reviewer.strip()
        unreadable = answer.decision == "cannot be read"
        values = dict.fromkeys(before) if unreadable else clean_values(answer.model_dump())
        problems = [] if unreadable else [redact(_redact(p, values))
                                          for p in correction_problems(values, item.orientation)]
        if not who:
            problems.insert(0, "reviewer: say who you are (it is stored with the correction)")
        if problems:
            logger.info("document %d of %d: answer refused: %s", number, total, "; ".join(problems))
            continue
        decision = "cannot be read" if unreadable else decide(before, values)
        assert item.sha256 is not None
        await asyncio.to_thread(write_corrections, out, [Correction(
            sha256=item.sha256, page=item.page or 0, source_path=item.source_path,
            run_id=item.run_id or queue.run_id, who=who, decision=decision, before=before, after=values)])
        logger.info("document %d of %d: %s by a person", number, total, decision)
        return decision


async def _pause(form: type[DocumentReview], timeout_s: int, this_run: UUID) -> DocumentReview | None:
    """The answer to `form`; None when the run was cancelled (in the UI) while waiting. A run not started by
    a worker has nobody else to notice that: Prefect's pause only watches for the resume."""
    pause = asyncio.ensure_future(apause_flow_run(wait_for_input=form, timeout=timeout_s, poll_interval=POLL_S))
    watch = asyncio.ensure_future(_cancelled(this_run))
    try:
        await asyncio.wait({pause, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pause, watch):
            if not task.done():
                task.cancel()
                with suppress(asyncio.CancelledError):
                    await task
    if pause.done() and not pause.cancelled():
        return pause.result()  # the answer, or FlowPauseTimeout
    if watch.exception() is not None:
        raise watch.exception()  # type: ignore[misc]
    return None  # the watcher saw the run cancelled


async def _cancelled(run_id: UUID) -> None:
    """Return once the run is being cancelled or has ended (never on Paused or Running)."""
    async with get_client() as client:
        while True:
            await asyncio.sleep(POLL_S)
            try:
                state = (await client.read_flow_run(run_id)).state
            except httpx.HTTPError:  # a busy server: ask again (the pause itself fails if it stays away)
                continue
            if state is not None and (state.is_cancelling() or state.is_final()):
                return


def forget_pauses(run_id: UUID) -> int:
    """Delete every pause input (`paused-*`: form schema, description, answer) of a flow run; returns how many.

    Blocking on purpose: called from `finally` blocks of a task that may be cancelled (SIGTERM), where an
    `await` would be cancelled too and the personal data left behind."""
    deleted = 0
    with get_client(sync_client=True) as client:
        while True:
            try:
                inputs = client.filter_flow_run_input(run_id, PAUSE_INPUTS, limit=100, exclude_keys=set())
            except httpx.HTTPStatusError as exc:
                if exc.response.status_code == 404:  # no such flow run (any more)
                    return deleted
                raise
            before = deleted
            for stored in inputs:
                try:
                    client.delete_flow_run_input(run_id, stored.key)
                    deleted += 1
                except httpx.HTTPStatusError as exc:
                    if exc.response.status_code != 404:  # 404: deleted meanwhile (hook, a sweeping session)
                        raise
            if deleted == before:
                return deleted


async def sweep_leftovers(out: Path, this_run: UUID | None = None) -> int:
    """Delete the pause inputs earlier review sessions left in Prefect (a process killed by SIGKILL cannot);
    returns how many. Which sessions are over: review runs that ended or are being cancelled, paused runs whose
    pause deadline has passed (the live process would have moved on), and runs whose session lock on OUT is
    free (their process is gone; marked Crashed). Runs that are alive keep their forms."""
    now = datetime.now(timezone.utc)
    deleted = 0
    with _dead_sessions(out) as dead:
        for run_id in dead - {this_run}:
            deleted += await asyncio.to_thread(forget_pauses, run_id)
            await asyncio.to_thread(_mark_crashed, run_id)
        async with get_client() as client:
            offset = 0
            while True:
                runs = await client.read_flow_runs(
                    flow_filter=FlowFilter(name=FlowFilterName(any_=[FLOW_NAME])),
                    flow_run_filter=FlowRunFilter(state=FlowRunFilterState(
                        type=FlowRunFilterStateType(any_=_SWEPT_STATES))),
                    sort=FlowRunSort.ID_DESC, limit=200, offset=offset)
                for run in runs:
                    state = run.state
                    if run.id == this_run or run.id in dead or state is None:
                        continue
                    deadline = state.state_details.pause_timeout
                    over = state.is_final() or state.is_cancelling() or (
                        state.is_paused() and deadline is not None and deadline < now)
                    if over:
                        deleted += await asyncio.to_thread(forget_pauses, run.id)
                if len(runs) < 200:
                    return deleted
                offset += 200


def _mark_crashed(run_id: UUID) -> None:
    with get_client(sync_client=True) as client:
        try:
            state = client.read_flow_run(run_id).state
        except ObjectNotFound:
            return
        if state is not None and not state.is_final():
            client.set_flow_run_state(run_id, Crashed(
                message="the review process ended without a word (killed?); its questions were withdrawn by a "
                        "later review of the same output folder"), force=True)


@contextmanager
def _dead_sessions(out: Path) -> Iterator[set[UUID]]:
    """Flow run ids of review sessions on OUT whose process is gone (their lock is free). Their locks are held
    (so a second sweeper skips them) and removed when the block ends without an error."""
    held: list[tuple[int, Path]] = []
    dead: set[UUID] = set()
    folder = out / REVIEW
    handled = False
    try:
        if fcntl is not None and folder.is_dir():
            for path in folder.glob(SESSION_LOCK + "*"):
                if not path.name.endswith(".lock"):  # `.lock.tmp`: a session starting (not locked yet)
                    continue
                try:
                    run_id = UUID(path.name.removeprefix(SESSION_LOCK).removesuffix(".lock"))
                    fd = os.open(path, os.O_RDWR)
                except (ValueError, OSError):
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # held: that session is alive
                    os.close(fd)
                    continue
                held.append((fd, path))
                dead.add(run_id)
        yield dead
        handled = True
    finally:
        for fd, path in held:
            if handled:  # else the next review tries again
                with suppress(OSError):
                    path.unlink()
            os.close(fd)


@contextmanager
def _session_lock(out: Path, run_id: UUID) -> Iterator[None]:
    """Hold `OUT/review/.session-<run id>.lock` while asking: a later review of OUT tells a killed session by
    its free lock. Locked under a temporary name first, so the lock file never exists unlocked."""
    if fcntl is None:
        yield
        return
    folder = out / REVIEW
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{SESSION_LOCK}{run_id}.lock"
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.replace(tmp, path)
        yield
    finally:
        for name in (path, tmp):
            with suppress(OSError):
                name.unlink()
        os.close(fd)


def _redact(problem: str, values: dict[str, str | None]) -> str:
    """A refusal reason without the typed name and number (JSON Schema messages quote values with repr); the
    caller masks the rest with `redact` (a number typed into another field, say)."""
    for name, masked in (("name", "<name>"), ("id_number", mask_id(values.get("id_number")))):
        if values.get(name):
            problem = problem.replace(repr(values[name]), repr(masked))
    return problem


def _code(text: str) -> str:
    """`text` as a markdown code span, whatever it holds (backticks, control characters)."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] == "`" or text[-1:] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _describe(item: ReviewItem, page: Path, number: int, total: int, problems: list[str],
              values: dict[str, str | None]) -> str:
    """The markdown above the form: the file, why it is here, the link to its picture, refusals. Numbers
    masked (in the file name too); the picture is on the review page (inside OUT), not in Prefect."""
    link = f"{page.resolve().as_uri()}#{item.anchor}"
    lines = [f"### Document {number} of {total}: `{item.reason}`", "", f"File {_code(redact(item.source_path))}",
             "", item.reason_text, ""]
    if item.confidence is not None:
        name, view = min(((n, f) for n, f in item.fields.items() if f.confidence is not None),
                         key=lambda nf: nf[1].confidence or 0.0)
        lines.append(f"- least sure field: {name.replace('_', ' ')} ({view.state}, confidence {item.confidence:.3f})")
    if item.check_failures:
        lines.append(f"- failed checks: {', '.join(item.check_failures)}")
    if item.conflict is not None:  # which fields disagree, never their values (those are on the review page)
        lines.append(f"- the same number is on {len(item.conflict.disagreements)} other document(s) with another "
                     f"{' and '.join(f.replace('_', ' ') for f in item.conflict.fields)}")
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
