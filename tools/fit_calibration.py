#!/usr/bin/env python
"""Refit the confidence calibration table (pipeline/trust/calibration_table.json) on tuning manifests.

    python tools/make_samples.py /tmp/h115 --set hard --count 240 --seed 115
    python tools/fit_calibration.py /tmp/h115/manifest.json \\
        --observations data/calibration_observations.jsonl.gz --out pipeline/trust/calibration_table.json
    python tools/fit_calibration.py --from-observations data/calibration_observations.jsonl.gz --reclass \\
        --out pipeline/trust/calibration_table.json        # after a change to the evidence classes: no OCR

Tuning seeds are 101-120, for both `--set eval` and `--set hard`; every other seed is for evaluation. The
observations of the shipped table are committed (`data/calibration_observations.jsonl.gz`: classes, checks, raw
scores and right/wrong per field, no values); more tuning pages are added by naming more tuning manifests
with the same `--observations` file (pages already in it, by manifest folder name and page path, are skipped:
name the folders by set and seed) and the folder to `tools/tuning_sets.py`, the recipe of every tuning folder.
After a change to what a reader records, every tuning page is read again: that script's docstring has the commands.

Every manifest page is prepared and read by the embedded OCR backend (raw scores: backends never calibrate;
`--jobs N`: by N worker processes, each on a core of its own, the observations written in the manifests' order); each
present field becomes one observation (evidence class with the doc type and checks it comes from, raw score, right or
wrong: values are never written). Per class, pool-adjacent-violators gives the isotonic step function from raw
score to the share of right values, each step mapped to the lower end of its 95% Wilson interval
(`pipeline.trust.fit`); the script prints and the table stores per class the observations, the right count
and the 95% interval. A class with fewer than 300 observations (`--min-observations`) stays capped at the
unseen cap, below the auto-accept threshold. `--observations` appends the observations (JSON lines) page by page,
so an interrupted run resumes, and rewrites the file as one gzip stream once every page is in; a refit from them
(`--from-observations`, with `--reclass` after a change to the evidence classes) needs no OCR as long as the raw
readings did not change. The table is keyed for the embedded backend (`key`: backend, OCR model id, no prompt).
Use tuning seeds only: evaluating on the seeds the table was fitted on would flatter it.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import TextIO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure  # noqa: E402
from pipeline.extract.ocr.backend import OcrBackend  # noqa: E402
from pipeline.ingest.discover import sha256_file  # noqa: E402
from pipeline.ops.evaluation import EvalItem, EvalReport, ItemResult, load_manifest, normalise, rescored  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402
from pipeline.settings import Settings  # noqa: E402
from pipeline.trust.fit import SHIPPED_MIN_OBSERVATIONS, fit  # noqa: E402
from pipeline.trust.key import ocr_key  # noqa: E402
from pipeline.trust.table import Calibration, evidence_class  # noqa: E402


Reader = Callable[[list], Iterable["list[dict] | None"]]  # page tasks -> their observations, in order


def observe(manifest: Path, read: Reader, limit: int | None = None, sink: Path | None = None,
            done: set[tuple[str, str, int]] | None = None) -> list[dict]:
    """One observation per present field of every page of `manifest` (its first `limit` pages). Each holds
    what its evidence class is computed from (doc type, checks passed and failed), so the classes can be
    redrawn later without reading the pages again (`--reclass`). Appended to the file `sink` page by page, in the
    manifest's order, as they come (`append_observations`); pages in `done` ((manifest, path, page) already
    observed) are not read again. `read` reads them (`readers`: in this process or in worker processes)."""
    name = manifest.parent.name
    items = load_manifest(manifest)[:limit]
    todo = [item for item in items if not (done and (name, item.rel_path, item.page) in done)]
    out = []
    for n, (item, page_obs) in enumerate(zip(todo, read([(name, item) for item in todo])), start=1):
        if page_obs is None:  # a page that could not be prepared is not observed
            continue
        if sink is not None:
            append_observations(sink, page_obs)
        out += [o for o in page_obs if o["field"] is not None]
        print(f"\r{name}: {n + len(items) - len(todo)}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


_reader: list[tuple[Settings, OcrBackend]] = []  # this process's settings and embedded reader (`_start_reader`)


def _start_reader(today: date, cores=None) -> None:
    """Make this process's reader; a worker first takes one core of `cores` (a queue of the parent's cores) for
    itself, so each reader runs one thread on a core of its own (`rapidocr_stages.usable_cores`), as processes
    pinned one to a core do: threads of two readers sharing cores cost more CPU for the same pages."""
    if cores is not None:
        os.sched_setaffinity(0, {cores.get()})
    _reader[:] = [(Settings(), OcrBackend(today=today))]


def _page_observations(task: tuple[str, EvalItem]) -> list[dict] | None:
    """The observations of one manifest page read by this process's reader (a row with `field` None when
    nothing was present, so a resumed run skips the page too); None when the page cannot be prepared."""
    name, item = task
    settings, backend = _reader[0]
    ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
    prepared = prepare_page(ref, settings.prepare)
    if isinstance(prepared, Failure):
        return None
    ex = backend.read(prepared)
    doc_type = ex.fields.get("doc_type")
    page_obs = []
    for field in FIELD_NAMES:
        reading = ex.field_states.get(field)
        if reading is None or reading.state != "present":
            continue
        page_obs.append({"manifest": name, "path": item.rel_path, "page": item.page, "condition": item.condition,
                         "field": field, "doc_type": doc_type, "checks": ex.checks, "failures": ex.check_failures,
                         "class": evidence_class(field, doc_type, ex.checks, ex.check_failures),
                         "raw": reading.confidence,
                         "correct": normalise(field, reading.value) == normalise(field, item.truth[field])})
    return page_obs or [{"manifest": name, "path": item.rel_path, "page": item.page, "condition": item.condition,
                         "field": None}]


@contextmanager
def readers(today: date, jobs: int) -> Iterator[Reader]:
    """A function from page tasks to their observations, in order: read in this process (`jobs` 1), or by `jobs`
    worker processes, each with a reader of its own (its models loaded once for every manifest) on a core of its
    own when there are as many cores as workers."""
    if jobs <= 1:
        _start_reader(today)  # made for this call: a reader kept from an earlier call may hold another `today`
        yield lambda tasks: map(_page_observations, tasks)
        return
    context = multiprocessing.get_context("spawn")  # no fork of a process that may hold model threads
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    cores = None  # fewer cores than workers (or no affinity call): placement left to the OS
    if len(allowed) >= jobs:
        cores = context.Queue()
        for core in allowed[:jobs]:
            cores.put(core)
    with ProcessPoolExecutor(jobs, mp_context=context, initializer=_start_reader, initargs=(today, cores)) as pool:
        yield lambda tasks: pool.map(_page_observations, tasks)


def _open(path: Path, mode: str) -> TextIO:
    """A JSON-lines file as text, gzip-compressed when its name ends in `.gz` (the committed observations)."""
    return gzip.open(path, mode + "t", encoding="utf-8") if path.suffix == ".gz" else path.open(mode, encoding="utf-8")


def append_observations(path: Path, rows: list[dict]) -> None:
    """Append one page's rows, the file closed after each page (a gzip file gets one member per page), so an
    interrupted run loses at most the page it was writing."""
    with _open(path, "a") as f:
        f.write("".join(json.dumps(o, ensure_ascii=False) + "\n" for o in rows))


def compact_observations(path: Path) -> None:
    """Rewrite the observations as one stream (one gzip member), atomically, once every page is in: a member per
    page compresses each page alone, which makes the committed file over ten times larger."""
    rows = read_observations(path, markers=True)
    tmp = path.with_name(f".{path.name}.part{path.suffix}")  # the same suffix: compressed as the file is
    tmp.unlink(missing_ok=True)  # what an interrupted rewrite left
    append_observations(tmp, rows)  # one write to a new file: one member
    os.replace(tmp, path)


def read_observations(path: Path, *, markers: bool = False) -> list[dict]:
    """The field observations of a JSON-lines file, gzip-compressed or not (with `markers`, also the rows of
    pages with no present field, which only say the page was read). A gzip member cut short by an interrupted
    run ends the reading: the pages before it are kept, the cut page is read again."""
    rows = []
    with _open(path, "r") as f:
        try:
            for line in f:
                if line.strip():
                    rows.append(json.loads(line))
        except (EOFError, json.JSONDecodeError):
            pass
    return rows if markers else [o for o in rows if not ("field" in o and o["field"] is None)]


def reclass(observations: list[dict]) -> list[dict]:
    """The observations with their evidence class redrawn by the current `evidence_class` (same raw scores)."""
    return [{**o, "class": evidence_class(o["field"], o["doc_type"], o["checks"], o["failures"])}
            if "checks" in o else o for o in observations]


def from_report(report: Path) -> list[dict]:
    """Observations from an `idflow eval` report made with raw scores (an empty calibration table)."""
    data = json.loads(report.read_text(encoding="utf-8"))
    return [{"manifest": report.parent.name, "condition": d["condition"], "field": k, "class": cls, "raw": raw,
             "correct": d["correct"][k]} for d in data["documents_scored"] for k, (cls, raw) in d["evidence"].items()]


def check(table: Calibration, report: Path) -> EvalReport:
    """`table` applied to a held-out eval report made with raw scores: the same report `idflow eval` would
    give with that table shipped (`evaluation.rescored`)."""
    results = []
    for d in json.loads(report.read_text(encoding="utf-8"))["documents_scored"]:
        item = EvalItem(path=Path(d["path"]), rel_path=d["path"], page=0, truth={}, condition=d["condition"])
        raw = ItemResult(item, {}, d["correct"], [], 0.0, d["failure"],
                         {k: (cls, score) for k, (cls, score) in d["evidence"].items()}, d["states"],
                         d.get("disagreeing", []))
        results.append(rescored(raw, table))
    return EvalReport(results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifests", type=Path, nargs="*")
    ap.add_argument("--from-observations", type=Path, action="append", default=[])
    ap.add_argument("--from-report", type=Path, action="append", default=[],
                    help="observations from an idflow eval report.json made with raw scores (tuning seeds only)")
    ap.add_argument("--check-report", type=Path, action="append", default=[],
                    help="held-out raw-score eval report: print the fitted table's precision/coverage on it")
    ap.add_argument("--observations", type=Path,
                    help="append the observations of the manifests' pages here (JSON lines, gzip-compressed when "
                         "named .gz); pages already in it are not read again")
    ap.add_argument("--reclass", action="store_true",
                    help="redraw every observation's evidence class with the current code before fitting")
    ap.add_argument("--out", type=Path, default=Path("pipeline/trust/calibration_table.json"))
    ap.add_argument("--today", type=date.fromisoformat, default=date.today())
    ap.add_argument("--limit", type=int, default=None, help="read only the first N pages of each manifest")
    ap.add_argument("--jobs", type=int, default=1,
                    help="worker processes reading the pages, each on a core of its own (default: %(default)s)")
    ap.add_argument("--min-observations", type=int, default=SHIPPED_MIN_OBSERVATIONS,
                    help="a class with fewer observations stays capped at the unseen cap (default: %(default)s)")
    args = ap.parse_args(argv)
    if not args.manifests and not args.from_observations and not args.from_report:
        ap.error("give tuning manifests, --from-observations or --from-report")
    observations = [o for p in args.from_observations for o in read_observations(p)]
    observations += [o for p in args.from_report for o in from_report(p)]
    if args.manifests:
        # appended page by page: an interrupted run resumes where it stopped
        rows = read_observations(args.observations, markers=True) \
            if args.observations and args.observations.exists() else []
        done = {(o["manifest"], o["path"], o["page"]) for o in rows if "path" in o}
        observations += [o for o in rows if not ("field" in o and o["field"] is None)]
        with readers(args.today, args.jobs) as read:
            for manifest in args.manifests:
                observations += observe(manifest, read, args.limit, args.observations, done)
        if args.observations and args.observations.exists():
            compact_observations(args.observations)  # every page in: one stream, as committed
    if args.reclass:
        observations = reclass(observations)
    table = fit(observations, key=ocr_key().as_dict(), min_observations=args.min_observations)
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"{len(observations)} observations from {', '.join(table['fitted_on'])}; per class: observations, right, "
          "95% Wilson interval of the share right, then the steps raw->confidence(observations)")
    for name, c in table["classes"].items():
        low, high = c["interval95"]
        print(f"{name:38s} n={c['observations']:5d} right={c['right_total']:5d} [{low:.4f}, {high:.4f}]"
              f"{' capped' if c['capped'] else ''}  " + "  ".join(
            f"{e:.3f}->{v:.4f}({n})" for e, v, n in zip(c["edges"], c["values"], c["counts"])))
    for report in args.check_report:
        checked = check(Calibration.from_dict(table), report)
        print(f"{report}: {len(checked.results)} documents; precision/coverage with this table:")
        for t, coverage, precision in checked.precision_coverage()[:12]:
            print(f"  threshold {t:.4f}: coverage {coverage:.1%}, precision {precision:.2%}")
        point = checked.operating_point()
        print(f"  precision >= 99.5% from threshold {point[0]:.4f}: coverage {point[1]:.1%}" if point
              else "  precision never reaches 99.5%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
