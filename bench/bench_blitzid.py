"""Per page on one core: idflow's embedded path vs blitzid (a public RapidOCR-based MRZ reader), same real pages.

Setup (blitzid is never a dependency of idflow: it lives in a venv of its own, driven through a worker; it needs
Python >= 3.12, which pyenv or the system may provide):
    python3.12 -m venv /work/peers/blitzid && /work/peers/blitzid/bin/pip install blitzid rapidocr==3.10.0
(rapidocr is blitzid's `ocr` extra without the LLM parts its MRZ reader does not use; pinned to idflow's version
so both readers run the same detection and recognition models.)
Run from the repo root with idflow's venv:
    PYTHONPATH=$PWD taskset -c 1 env OMP_NUM_THREADS=1 python bench/bench_blitzid.py \
        ../shared/realdata/eval_manifest.json --blitzid-python /work/peers/blitzid/bin/python

Pages: the manifest's entries whose doc_type is an ICAO MRZ layout (TD1, TD2, TD3, MRV-A, MRV-B): the shared
real specimens with a machine-readable zone. Entries without one (PRC cards, MIDV templates without a zone) and
the French 1988 card (its own 2x36 layout, which blitzid does not parse) are left out. blitzid runs in
bench/blitzid_worker.py, a long-lived process started with the given interpreter; it inherits this process's CPU
affinity (taskset) and gets OMP_NUM_THREADS=1. Both readers read the first page once untimed (warm models and
imports), then alternate page by page: idflow, blitzid, idflow, ... so load on a shared machine falls on both alike.

Figures, per reader:
  median / mean ms  wall time of one page, timed in the reader's own process. idflow: Engine.one on the page
                    (decode, orientation, budget resize, RapidOCR, MRZ parse, validation: what a run does per
                    page). blitzid: MRZReader.read(path) (decode, RapidOCR over the page, zone selection, checks).
  CPU median        the reader's process CPU time over the same call (every thread). Wall time on one core
                    depends on who else runs there: idflow sizes ONNX Runtime's pool to the allowed cores (one
                    thread here), RapidOCR's defaults in blitzid size it to the machine's, so under a competing
                    process on the same core blitzid's threads take more turns; CPU time does not depend on that.
  all 3 right       pages whose name, document number and expiry date all equal the manifest's truth on every
                    pass, compared as `python -m pipeline eval` compares (pipeline.ops.evaluation.normalise).
  wrong values      (page, field) pairs with a value present but not equal to the truth on some pass: what a
                    store would keep wrong. idflow's values are those of a Record (a Failure stores none).
  no zone           blitzid: pages where MRZReader raised MRZError (no zone found, or a check digit failed).
  ratio of medians  blitzid's median / idflow's median: above 1, idflow is faster per page.
blitzid's MRZRecord is mapped as: name = surname + " " + given_names; id_number = document_number; expiry_date =
expiry_date (YYMMDD) with the century idflow infers (pipeline.formats.dates.yymmdd, kind="expiry"), so the
comparison is of what each reader read, not of a century rule.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from peer_worker import PeerWorker, peer_worker

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure, Record
from pipeline.extract.factory import make_backend
from pipeline.formats.dates import yymmdd
from pipeline.ingest.discover import sha256_file
from pipeline.ops.evaluation import EvalItem, load_manifest, normalise
from pipeline.run.engine import Engine
from pipeline.settings import Settings

MRZ_KINDS = frozenset({"TD1", "TD2", "TD3", "MRVA", "MRVB"})
WORKER = Path(__file__).resolve().parent / "blitzid_worker.py"
Page = tuple[EvalItem, DocumentRef]


def mrz_pages(manifest: Path) -> list[Page]:
    """The manifest's MRZ-layout entries with their truth, as the pages a run would read."""
    return [(item, DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path),
                               page=item.page))
            for item in load_manifest(manifest) if item.doc_type in MRZ_KINDS]


def idflow_fields(outcome: Record | Failure) -> dict[str, Any]:
    return outcome.extraction.fields if isinstance(outcome, Record) else {}


def blitzid_fields(mrz: dict[str, Any] | None) -> dict[str, Any]:
    """blitzid's MRZRecord subset in the manifest's terms (mapping in the module docstring)."""
    if mrz is None:
        return {}
    expiry = yymmdd(mrz["expiry_date"] or "", kind="expiry", today=date.today())
    return {"name": f"{mrz['surname'] or ''} {mrz['given_names'] or ''}",
            "id_number": mrz["document_number"] or None,
            "expiry_date": expiry.isoformat() if expiry else None}


@dataclass
class Tally:
    """One reader's figures over the passes: seconds per page, pages not all right, wrong (page, field) pairs."""

    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    not_all_right: set[str] = field(default_factory=set)
    wrong: set[tuple[str, str]] = field(default_factory=set)
    no_zone: set[str] = field(default_factory=set)

    def add(self, item: EvalItem, seconds: float, cpu_seconds: float, predicted: dict[str, Any]) -> None:
        self.seconds.append(seconds)
        self.cpu_seconds.append(cpu_seconds)
        for name in FIELD_NAMES:
            got, truth = normalise(name, predicted.get(name)), normalise(name, item.truth[name])
            if got != truth:
                self.not_all_right.add(item.rel_path)
                if got is not None:
                    self.wrong.add((item.rel_path, name))


async def alternate(pages: list[Page], blitzid: PeerWorker, repeat: int) -> tuple[Tally, Tally]:
    """Each page read by idflow then by blitzid, `repeat` times over the set."""
    settings = Settings(concurrency=1)
    ours, theirs = Tally(), Tally()
    async with Engine(settings, make_backend(settings), prepare_workers=1) as engine:
        await engine.one(pages[0][1])  # warm-up for both: a run's engine and a user's reader are warm too
        blitzid.ask(pages[0][1].path)
        for _ in range(repeat):
            for item, ref in pages:
                started, cpu_started = time.perf_counter(), time.process_time()
                outcome = await engine.one(ref)
                ours.add(item, time.perf_counter() - started, time.process_time() - cpu_started,
                         idflow_fields(outcome))
                reply = blitzid.ask(ref.path)  # {"ms", "cpu_ms", "mrz", "error"}
                theirs.add(item, reply["ms"] / 1000, reply["cpu_ms"] / 1000, blitzid_fields(reply["mrz"]))
                if reply["error"] is not None:
                    theirs.no_zone.add(item.rel_path)
    return ours, theirs


def report(label: str, tally: Tally, pages: list[Page]) -> None:
    times, kinds = tally.seconds, sorted({item.doc_type or "" for item, _ in pages})
    print(f"{label:>16}: {len(pages)} pages  median {statistics.median(times) * 1000:6.0f} ms  "
          f"mean {statistics.mean(times) * 1000:6.0f} ms  "
          f"CPU median {statistics.median(tally.cpu_seconds) * 1000:6.0f} ms  "
          f"all 3 right {len(pages) - len(tally.not_all_right)}/{len(pages)}  "
          f"wrong values {len(tally.wrong)}" + (f"  no zone {len(tally.no_zone)}" if tally.no_zone else "")
          + f"  (n={len(times)})")
    by_kind = {kind: [item.rel_path not in tally.not_all_right for item, _ in pages if item.doc_type == kind]
               for kind in kinds}
    print(f"{'all 3 right by':>16}: " + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in by_kind.items()))
    if tally.not_all_right:
        print(f"{'not all right':>16}: {', '.join(sorted(tally.not_all_right))}")
    if tally.wrong:
        print(f"{'wrong':>16}: {', '.join(f'{path} {name}' for path, name in sorted(tally.wrong))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path, help="the shared real specimens' eval_manifest.json")
    parser.add_argument("--blitzid-python", type=Path, required=True,
                        help="python of the venv where blitzid is installed")
    parser.add_argument("--repeat", type=int, default=1, help="passes over the pages (timing samples per page)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N pages (a quick check)")
    args = parser.parse_args()
    pages = mrz_pages(args.manifest)[:args.limit]
    print(f"{len(pages)} MRZ pages x {args.repeat} passes from {args.manifest.parent}, "
          f"affinity {sorted(os.sched_getaffinity(0))}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load avg {os.getloadavg()}")
    with peer_worker("blitzid", args.blitzid_python, WORKER, OMP_NUM_THREADS="1") as blitzid:
        ours, theirs = asyncio.run(alternate(pages, blitzid, args.repeat))
    report("idflow embedded", ours, pages)
    report("blitzid", theirs, pages)
    print(f"ratio of medians (blitzid / idflow): "
          f"{statistics.median(theirs.seconds) / statistics.median(ours.seconds):.2f}x wall, "
          f"{statistics.median(theirs.cpu_seconds) / statistics.median(ours.cpu_seconds):.2f}x CPU  "
          f"load avg after {os.getloadavg()}")


if __name__ == "__main__":
    main()
