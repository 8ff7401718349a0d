"""The `idflow` command. Thin: it checks configuration, then hands over to the flow or to library functions."""

from __future__ import annotations

import asyncio
import gc
import importlib.util
import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from idflow.batch import register as register_batch
from idflow.common import (
    PrefectApi,
    config_error,
    console,
    engine_errors_to_log,
    holding_output,
    load_settings,
    prefect_api,
    refuse_unless_free,
    settings_problems,
)
from idflow.ops import register as register_ops
from idflow.retry import register as register_retry
from idflow.review import print_corrections
from idflow.review import register as register_review
from idflow.vllm import register as register_vllm
from pipeline.extract.registry import BACKEND_NAMES, VLLM_KEY_MISSING, VLM_NAMES, backend_spec, choices, escalates
from pipeline.ingest.inbox import is_text
from pipeline.masking import mask_id, mask_name, redact
from pipeline.run import progress
from pipeline.run.report import CONSOLE_COLUMNS, conflicts_line, decisions_line, documents_line, masked_rows
from pipeline.settings import Settings
from pipeline.store.parquet import OutputUnreadable, check_parts, readable_path

if TYPE_CHECKING:
    from pipeline.ops.evaluation import EvalItem

# pretty_exceptions off: an unforeseen error reaches `main`, which prints its traceback masked (typer's own printed
# file names and values as they are, document numbers inside them too)
app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Scanned identity documents in, validated records out.")


def main() -> None:
    """The `idflow` command.

    Why `gc.freeze()` on the way out: at exit the interpreter's final collections walk every object Prefect,
    pydantic and the run left behind, which took about 1 s of an empty run's 5 s; frozen objects are skipped, and
    nothing that matters (atexit handlers, Prefect's log and event flushing, buffered output) is bypassed.
    An error no command turned into a message ends with its traceback on stderr, masked, and exit 1.
    """
    try:
        app()
    except OutputUnreadable as exc:  # a part of OUT damaged from outside, whichever command read it: one line
        sys.exit(config_error(str(exc)).exit_code)
    except Exception:  # a bug or an unforeseen condition: its traceback, with document numbers and keys masked
        sys.stderr.write(redact(traceback.format_exc()))
        sys.exit(1)
    finally:
        gc.freeze()


@contextmanager
def progress_bar(label: str) -> Iterator[progress.ProgressSink]:
    """A transient rich bar fed by `pipeline.run.progress` reports (done, total)."""
    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        task_id = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task_id, completed=done, total=total)


@app.command()
def run(
    input_dir: Annotated[Path, typer.Argument(help="folder of scans (searched recursively)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder for Parquet results")] = Path("out"),
    backend: Annotated[Optional[str], typer.Option(help=choices(BACKEND_NAMES))] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="documents in flight at once, 1-256 (default "
                                                       "IDFLOW_CONCURRENCY, 4)")] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="documents per Prefect task")] = None,
    force: Annotated[bool, typer.Option(help="redo documents already done with the same settings")] = False,
    fallback: Annotated[Optional[str], typer.Option(help="vllm only: none | openai when no server is healthy")] = None,
    dry_run: Annotated[bool, typer.Option(help="print predicted visual tokens and cost, send nothing")] = False,
    dask: Annotated[Optional[str], typer.Option(help="run batches on Dask: tcp://host:8786 or local:N")] = None,
    wait: Annotated[bool, typer.Option(help="wait for a run writing OUT instead of refusing (exit 2)")] = False,
    debug: Annotated[bool, typer.Option(help="print the traceback of a run that cannot go on (always in the "
                                             "error log of the Prefect home)")] = False,
) -> None:
    """Extract every document under INPUT_DIR. Exit 0 when every document is accounted for; 2 for a
    configuration or environment problem (OUT busy, full or read-only), said in one line."""
    if not input_dir.is_dir():
        raise config_error(f"input folder {input_dir} does not exist or is not a folder")
    if not is_text(str(input_dir.resolve())) or not is_text(str(out.resolve())):
        raise config_error(f"{readable_path(str(input_dir))} or the output folder has a name that is not UTF-8, "
                           "which a Prefect flow parameter cannot carry: rename it (files inside may have any name)")
    if out.resolve() == input_dir.resolve():
        raise config_error("--out is the input folder itself: choose another folder (one inside the input "
                           "folder is fine; it is not read as input)")
    settings = load_settings(backend=backend, concurrency=concurrency, batch_size=batch_size,
                             vllm_fallback=fallback)
    if dry_run:
        print_estimate(input_dir, settings)
        raise typer.Exit(0)
    if dask and not all(map(importlib.util.find_spec, ("prefect_dask", "distributed"))):
        raise config_error("--dask needs the dask extra: pip install 'idflow[dask]'")
    check_parts(out)  # a damaged OUT: one line here, not a failed flow's traceback
    refuse_unless_free(out, wait=wait, debug=debug)  # the line OUT's lock would give, without starting Prefect
    with prefect_api(settings) as ready:
        from flows.extract import extract_folder

        gc.freeze()  # the imports' objects live as long as the process: keep the run's collections off them
        api = ready()

        async def extract() -> dict:
            from pipeline.ingest import sources

            folder = sources.register(out, input_dir)  # under OUT's lock; the folder's name stays out of Prefect
            try:
                with engine_errors_to_log(debug=debug), progress_bar("extracting") as sink, \
                        progress.listening(sink):
                    return await extract_folder(folder, str(out), backend=settings.backend,
                                                concurrency=settings.concurrency, batch_size=settings.batch_size,
                                                force=force, dask=dask, wait_for_lock=wait,
                                                vllm_fallback=fallback)
            finally:
                sources.forget(out, folder)

        summary = holding_output(out, extract, wait=wait, debug=debug,
                                 what_now="documents finished so far are stored; run the same command again to "
                                          "do the rest")
    print_summary(summary)
    if summary["results"] or summary["failures"]:  # reading OUT's tables costs ~1 s of imports
        show_rows(out, run_id=summary["run_id"])
    print_where_to_look(summary, out, api)
    raise typer.Exit(0 if summary["accounted"] else 1)


def print_where_to_look(summary: dict, out: Path, api: PrefectApi) -> None:
    """The run's last lines: the flow run in the Prefect UI (while the local server lives, and how long that is),
    the review page, and what needs a person."""
    if api.ui:
        link = f"{api.ui.rstrip('/')}/runs/flow-run/{summary['run_id']}"
        if api.local:
            stays = f"{api.idle_s / 60:g} min" if api.idle_s >= 60 else f"{api.idle_s:g} s"
            link += (f" (the local Prefect server stays up {stays} after the last run ends; `idflow ui` keeps it "
                     "up to browse earlier runs)")
        console.print(f"Prefect UI: {link}", markup=False, soft_wrap=True)
    elif api.local:
        console.print("Prefect UI: off (IDFLOW_PREFECT_UI=false); `idflow ui` starts a local server with it",
                      markup=False, soft_wrap=True)
    page = summary.get("review_page")
    if page:
        console.print(f"review page: {out / page}", markup=False, soft_wrap=True)
    if line := decisions_line(summary):
        console.print(line, markup=False, soft_wrap=True)


@app.command()
def sharded(
    input_dir: Annotated[Path, typer.Argument(help="folder of scans on shared storage")],
    out: Annotated[Path, typer.Option("--out", "-o", help="output folder on shared storage")] = Path("out"),
    backend: Annotated[Optional[str], typer.Option(help=choices(BACKEND_NAMES))] = None,
    shard_size: Annotated[Optional[int], typer.Option(help="files per shard (default IDFLOW_SHARD_SIZE, 2000)")] = None,
    parallel: Annotated[int, typer.Option(help="shards queued or running at once")] = 8,
    deployment: Annotated[str, typer.Option(help="extract deployment the shards run on")] = "extract-folder/shard",
) -> None:
    """Split INPUT_DIR into shards run by the workers of a work pool (needs PREFECT_API_URL)."""
    if not input_dir.is_dir():
        raise config_error(f"input folder {input_dir} does not exist or is not a folder")
    settings = load_settings(backend=backend)
    from flows.sharded import extract_sharded

    summary = asyncio.run(extract_sharded(str(input_dir.resolve()), str(out.resolve()), backend=settings.backend,
                                          shard_size=shard_size, parallel_shards=parallel, deployment=deployment))
    print_summary(summary)
    raise typer.Exit(0 if summary["accounted"] else 1)


def print_estimate(input_dir: Path, settings: Settings) -> None:
    from pipeline.ops.estimate import TYPICAL_COMPLETION_TOKENS, estimate_folder

    est = estimate_folder(input_dir, settings)
    max_tokens = settings.openai.max_tokens
    console.print(f"{est.pages} pages to send ({est.skipped} skipped, {est.unreadable} unreadable); "
                  f"visual tokens {est.visual_tokens} (from page sizes on the {settings.prepare.patch} px grid; unreadable pages excluded only once decoded)")
    console.print(f"prompt tokens ≈ {est.prompt_tokens(settings)}; completion ≈ {est.pages * TYPICAL_COMPLETION_TOKENS}"
                  f" (at most {est.pages * max_tokens})")
    console.print(f"estimated cost ≈ {est.cost(settings, TYPICAL_COMPLETION_TOKENS):.4f} "
                  f"(at most {est.cost(settings, max_tokens):.4f}) at {settings.openai.price_prompt_per_mtok} / "
                  f"{settings.openai.price_completion_per_mtok} per million prompt / completion tokens")


def print_summary(summary: dict) -> None:
    table = Table(title=f"run {summary['run_id']} ({summary['backend']})")
    for col in ("seen", "results", "failures", "skipped"):
        table.add_column(col, justify="right")
    table.add_row(*(str(summary[c]) for c in ("seen", "results", "failures", "skipped")))
    console.print(table)
    verdict = "[green]yes[/green]" if summary["accounted"] else "[red]NO[/red]"
    console.print(f"seen = results + failures + skipped: {verdict}")
    for reason, n in sorted(summary["failures_by_reason"].items()):
        console.print(f"  failure {reason}: {n}")
    if line := conflicts_line(summary):
        console.print(line, markup=False)
    if escalates(summary["backend"]):
        console.print(f"VLM calls saved by the OCR pass: {summary['vlm_calls_saved']} of {summary['results']} results")
    if line := documents_line(summary):
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"{summary['docs_per_s']} documents/s over {summary['elapsed_s']} s; "
                  f"visual tokens {summary['visual_tokens']}, prompt/completion tokens "
                  f"{summary['prompt_tokens']}/{summary['completion_tokens']}")


def show_rows(out: Path, run_id: str | None = None, limit: int = 20) -> None:
    """The first results (of one run, or all) and the failure queue's current state: each failing document
    once, with its failed attempts (of this run's failures only, when `run_id` is given)."""
    from pipeline.review.failure_queue import current_failures
    from pipeline.store.parquet import RESULTS, read_table

    results = read_table(out, RESULTS, run_id=run_id)
    if results is not None:
        rows = masked_rows(results.to_pylist(), CONSOLE_COLUMNS, limit)
        table = Table(title=f"results ({results.num_rows} rows, ID numbers masked)")
        for col in CONSOLE_COLUMNS:
            table.add_column(col.replace("_", " "), overflow="fold")
        for row in rows:  # names and values are data, not rich markup
            table.add_row(*("" if row[c] is None else escape(str(row[c])) for c in CONSOLE_COLUMNS))
        console.print(table)
    queue = [r for r in current_failures(out).to_pylist() if run_id is None or r["run_id"] == run_id]
    if queue:
        columns = ("source_path", "page", "stage", "reason", "attempts", "detail")
        table = Table(title=f"failure queue ({len(queue)} documents; attempts = failed runs)")
        for col in columns:
            table.add_column(col)
        for row in queue[:limit]:
            table.add_row(*("" if row[c] is None else escape(redact(str(row[c]))[:80]) for c in columns))
        console.print(table)


# What `print_summary` reads; a summary written by an older idflow (a `batch import` before it kept a run's
# accounting) may lack them.
_SUMMARY_KEYS = ("run_id", "backend", "seen", "results", "failures", "skipped", "accounted", "failures_by_reason",
                 "docs_per_s", "elapsed_s", "visual_tokens", "prompt_tokens", "completion_tokens")


def _print_partial_summary(summary: dict) -> None:
    """What an older run summary holds, as it is, with a note that its accounting was not recorded."""
    console.print(f"run {summary.get('run_id', '?')} ({summary.get('backend', '?')}): this summary has no "
                  "accounting (seen = results + failures + skipped was not recorded by the idflow that wrote it)",
                  markup=False)
    for key, value in summary.items():
        if key not in ("run_id", "backend") and not key.endswith("_hex"):  # *_hex: the exact bytes of a name
            console.print(f"  {key}: {redact(str(value))}", markup=False)


@app.command()
def show(out: Annotated[Path, typer.Argument(help="output folder of a previous run")] = Path("out")) -> None:
    """Print the latest run summary and the first rows of the results and the failure queue."""
    from pipeline.store.parquet import latest_run_summary

    summary = latest_run_summary(out)
    if summary is None:
        raise config_error(f"no idflow run found in {out}")
    if all(key in summary for key in _SUMMARY_KEYS):
        print_summary(summary)
        if line := decisions_line(summary):
            console.print(line, markup=False)
    else:
        _print_partial_summary(summary)
    show_rows(out)
    print_corrections(out)


def labelled_items(manifest: Path, root: Path | None) -> list[EvalItem]:
    """The manifest's documents (`idflow eval`, `idflow calibrate`), or one line and exit 2 when the manifest or a
    file it names is missing."""
    from pipeline.ops.evaluation import load_manifest

    if not manifest.is_file():
        raise config_error(f"manifest {manifest} not found")
    items = load_manifest(manifest, root)
    missing = [item for item in items if not item.path.is_file()]
    if missing:
        raise config_error(f"{len(missing)} of the manifest's {len(items)} files are not under "
                           f"{root or manifest.parent} (first: {missing[0].rel_path}); paths are relative to the "
                           "manifest's folder unless --root says otherwise")
    return items


@app.command("eval")
def eval_(
    manifest: Annotated[Path, typer.Argument(help="ground-truth manifest (JSON list with path and fields)")],
    out_dir: Annotated[Optional[Path], typer.Argument(help="where to write report.json")] = None,
    backend: Annotated[Optional[str], typer.Option(help=choices(BACKEND_NAMES))] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="documents in flight at once")] = None,
    root: Annotated[Optional[Path], typer.Option(
        help="folder the manifest's paths are relative to (default: the manifest's folder)")] = None,
) -> None:
    """Field accuracy, per-condition accuracy, invented values and auto-accept precision on a manifest."""
    from pipeline.ops.evaluation import evaluate

    items = labelled_items(manifest, root)
    settings = load_settings(backend=backend, concurrency=concurrency)
    with progress_bar("evaluating") as sink, progress.listening(sink):
        report = asyncio.run(evaluate(items, settings))
    data = report.as_dict(settings.review.threshold)
    console.print(f"[bold]{data['documents']} documents, {data['fields_correct']}/{data['fields_total']} fields "
                  f"right = {data['accuracy']:.1%}; invented where absent: {data['invented_where_absent']}")
    for title, rows in (("per field", data["per_field"].items()),
                        ("per condition", ((c, f"{v['accuracy']:.1%} of {v['documents']} docs")
                                           for c, v in data["per_condition"].items()))):
        table = Table(title=title)
        table.add_column("")
        table.add_column("accuracy", justify="right")
        for k, v in rows:
            table.add_row(k, v if isinstance(v, str) else f"{v:.1%}")
        console.print(table)
    table = Table(title="auto-accept: documents with every field's confidence >= threshold")
    for col in ("threshold", "accepted", "precision"):
        table.add_column(col, justify="right")
    for row in data["auto_accept"]:
        table.add_row(f"{row['threshold']:.2f}", str(row["accepted"]),
                      f"{row['precision']:.1%}" if row["accepted"] else "—")  # nothing accepted: no precision
    console.print(table)
    print_trust(data, settings.backend)
    print_held_back(data, settings)
    masks = {"id_number": mask_id, "name": mask_name}
    for miss in data["misses"][:30]:  # the console is a log: names and numbers masked, full values in report.json
        fields = "; ".join(f"{k} truth {masks.get(k, str)(v['truth'])}, got {masks.get(k, str)(v['got'])}"
                           for k, v in miss.items() if isinstance(v, dict))
        failure = f" ({miss['failure']})" if miss.get("failure") else ""
        console.print(escape(redact(f"  miss: {miss['path']} [{miss['condition']}]{failure}: {fields}")))
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "report.json").write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")


def print_trust(data: dict, backend: str) -> None:
    """The backend's precision/coverage curve, its 99.5% operating point and the auto-accept share at the review
    threshold, overall and per document kind."""
    curve = data["precision_coverage"]
    step = max(1, len(curve) // 15)  # at most ~15 rows, the last (all documents) always shown
    table = Table(title=f"{backend}: precision/coverage (tables: {', '.join(data.get('tables') or ['—'])})")
    for col in ("threshold", "coverage", "precision"):
        table.add_column(col, justify="right")
    for row in [*curve[:-1:step], *curve[-1:]]:
        table.add_row(f"{row['threshold']:.4f}", f"{row['coverage']:.1%}", f"{row['precision']:.2%}")
    console.print(table)
    point = data["operating_point"]
    console.print(f"precision >= 99.5% from threshold {point['threshold']:.4f}: {point['coverage']:.1%} of documents "
                  f"auto-accepted at {point['precision']:.1%}" if point else "precision never reaches 99.5%")
    at = data["at_threshold"]
    console.print(f"{backend}: at the review threshold {at['threshold']:.2f}, {at['share']:.1%} of documents "
                  f"auto-accepted ({at['accepted']}), precision {at['precision']:.2%}")
    for kind, row in data["per_doc_type"].items():
        console.print(f"  {kind}: {row['share']:.1%} of {row['documents']} auto-accepted, precision "
                      f"{row['precision']:.2%}")


def print_held_back(data: dict, settings: Settings) -> None:
    """What holds documents back from being auto-accepted: per capture condition, and per evidence class with the
    observations the scoring table has of it (a class with too few cannot pass the threshold, whatever it reads)."""
    from pipeline.ops.calibrate import table_key
    from pipeline.trust.table import Tables

    at = data["at_threshold"]["threshold"]
    table = Table(title=f"auto-accepted at {at:.2f}, per capture condition")
    for col in ("condition", "documents", "accepted", "precision"):
        table.add_column(col, justify="right" if col != "condition" else "left")
    for condition, row in data["per_condition_at_threshold"].items():
        table.add_row(condition, str(row["documents"]), f"{row['accepted']} ({row['share']:.0%})",
                      f"{row['precision']:.1%}" if row["accepted"] else "—")
    console.print(table)
    try:
        scoring = Tables(settings.calibration.dir).find(table_key(settings))
    except ValueError:  # the hybrid scores with its parts' tables
        scoring = None
    table = Table(title=f"per evidence class, at {at:.2f} (table observations: the scoring table's)")
    for col in ("class", "fields", "right", "reach threshold", "precision", "alone holds back", "table observations",
                "table's best"):
        table.add_column(col, justify="right" if col != "class" else "left")
    short: list[str] = []
    for cls, row in data["per_evidence_class"].items():
        curve = scoring.curves.get(cls) if scoring is not None else None
        seen = sum(curve.counts) if curve else 0
        best = scoring.confidence(cls, 1.0) if curve else None  # the class's best, the rules on classes applied
        if scoring is not None and (best is None or best < at):
            short.append(cls)
        table.add_row(cls, str(row["fields"]), f"{row['right']}", str(row["passing"]),
                      f"{row['precision']:.1%}" if row["precision"] is not None else "—", str(row["holds_back"]),
                      str(seen) if scoring is not None else "—",
                      f"{best:.3f}" if best is not None else ("unseen: capped" if scoring is not None else "—"))
    console.print(table)
    if short:
        console.print(f"classes whose table never reaches {at:.2f} (too few observations, wrong too often, or "
                      "held below it by a rule): "
                      + ", ".join(short))


@app.command()
def calibrate(
    manifest: Annotated[Path, typer.Argument(help="ground-truth manifest of your own labelled documents")],
    backend: Annotated[Optional[str], typer.Option(help=choices(BACKEND_NAMES))] = None,
    root: Annotated[Optional[Path], typer.Option(
        help="folder the manifest's paths are relative to (default: the manifest's folder)")] = None,
    concurrency: Annotated[Optional[int], typer.Option(help="documents in flight at once")] = None,
) -> None:
    """Fit the confidence table of this backend + model + prompt from labelled documents, and store it
    (IDFLOW_CALIBRATION_DIR), so later runs with the same backend, model and prompt can auto-accept."""
    from pipeline.ops.calibrate import MIN_DOCUMENTS
    from pipeline.ops.calibrate import calibrate as fit_table

    items = labelled_items(manifest, root)
    if len(items) < MIN_DOCUMENTS:
        raise config_error(f"{len(items)} documents in {manifest.name}; a table needs at least {MIN_DOCUMENTS} "
                           "(docs/accuracy.md says why)")
    settings = load_settings(backend=backend, concurrency=concurrency)
    try:
        with progress_bar("calibrating") as sink, progress.listening(sink):
            result = asyncio.run(fit_table(items, settings, manifest.parent.name or manifest.stem))
    except ValueError as exc:  # TooFewDocuments, or a backend that has no table of its own (hybrid)
        raise config_error(str(exc)) from None
    table = Table(title=f"{result.key.label}: {result.documents} documents, per evidence class")
    for col in ("class", "observations", "right", "95% interval", "top confidence"):
        table.add_column(col, justify="left" if col == "class" else "right")
    for c in result.classes:
        table.add_row(c.name, str(c.seen), str(c.right), f"{c.low:.3f}-{c.high:.3f}", f"{c.best:.4f}")
    console.print(table)
    console.print("in-sample (the documents the table was fitted on; `idflow eval` other documents to measure it):")
    print_trust(result.report.as_dict(), settings.backend)
    console.print(f"stored {result.path}")


@app.command()
def doctor(
    backend: Annotated[Optional[str], typer.Option(
        help=f"{choices(VLM_NAMES)} (default: the configured backend's VLM)")] = None,
    sample: Annotated[Optional[Path], typer.Option(help="a document to use for step 3")] = None,
) -> None:
    """Three-step check of the model endpoint (text ping, image arrives, sample returns valid JSON)."""
    from pipeline.datamodel import DocumentRef, Failure
    from pipeline.ingest.discover import sha256_file
    from pipeline.ops.doctor import doctor as run_doctor
    from pipeline.ops.doctor import doctor_pool
    from pipeline.prepare import prepare_page

    try:
        settings = Settings(**({"backend": backend} if backend else {}))
    except ValidationError as exc:
        raise config_error(settings_problems(exc)) from None
    vlm = backend_spec(settings.backend).vlm_of(settings)
    if vlm is None:
        raise config_error(f"the {settings.backend} backend has no endpoint to check; use --backend "
                           f"{' or '.join(VLM_NAMES)}")
    if (problem := vlm.endpoint_check(settings)) is not None:  # a URL that is none: nothing to probe
        raise config_error(problem)
    prepared = None
    if sample is not None:
        if not sample.is_file():  # missing, a folder, or a device/FIFO (hashing /dev/zero never ends)
            raise config_error(f"sample {sample} is not a regular file")
        ref = DocumentRef(path=sample, rel_path=sample.name, sha256=sha256_file(sample))
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            raise config_error(f"sample {sample} cannot be prepared: {prepared.reason} ({prepared.detail})")
    if vlm.pooled:  # every endpoint of the pool
        if settings.vllm.api_key is None:
            raise config_error(VLLM_KEY_MISSING)
        try:
            reports = doctor_pool(settings.vllm, prepare=settings.prepare, sample=prepared)
        except (ValueError, KeyError, OSError) as exc:
            raise config_error(f"vLLM pool: {exc}") from None
    else:
        reports = [run_doctor(settings.openai, prepare=settings.prepare, sample=prepared)]
    for line in (line for report in reports for line in report.lines()):
        console.print(redact(line), markup=False)
    raise typer.Exit(max(report.exit_code for report in reports))


register_ops(app)
register_vllm(app)
register_batch(app)
register_retry(app)
register_review(app)
