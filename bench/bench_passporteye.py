"""Per page on one core: idflow's embedded path vs PassportEye (the public Tesseract-based MRZ reader), same pages.

Setup (PassportEye is never a dependency of idflow: it lives in a venv of its own, driven through a worker):
    apt-get install -y tesseract-ocr
    python3 -m venv /tmp/pe-venv && /tmp/pe-venv/bin/pip install passporteye
    PYTHONPATH=$PWD python tools/make_samples.py /tmp/pe-set --set eval --count 40 --seed 7
Run from the repo root with idflow's venv:
    PYTHONPATH=$PWD taskset -c 1 env OMP_NUM_THREADS=1 OMP_THREAD_LIMIT=1 nice -n 10 \
        python bench/bench_passporteye.py /tmp/pe-set/manifest.json --passporteye-python /tmp/pe-venv/bin/python

Pages: the manifest's passport / id_card / visa entries stored as single images. A PDF or a multi-page TIFF is
skipped (with every page > 0, which only such files have): PassportEye's read_mrz opens one image file, not a
container. PassportEye runs in bench/passporteye_worker.py, a long-lived process started with the given
interpreter; it inherits this process's CPU affinity (taskset) and gets OMP_NUM_THREADS=1 and OMP_THREAD_LIMIT=1
(Tesseract's OpenMP) whatever this process has. Both readers read the first page once untimed (warm models and
imports), then alternate page by page: idflow, PassportEye, idflow, ... (see bench/bench_embedded.py for why).

Figures, per reader:
  median / p90 ms   wall time of one page, timed in the reader's own process. idflow: Engine.one on the page
                    (decode, orientation, budget resize, RapidOCR, MRZ parse, validation: what a run does per
                    page). PassportEye: read_mrz(path) + to_dict() (decode, MRZ box search, Tesseract processes).
  all 3 right       pages whose name, document number and expiry date all equal the manifest's truth on every
                    pass, compared as `python -m pipeline eval` compares (pipeline.ops.evaluation.normalise: names
                    ignore case, accents, '<' fillers and spacing; numbers ignore case and spaces).
  ratio of medians  PassportEye's median / idflow's median: above 1, idflow is faster per page.
PassportEye's fields are mapped as: name = surname + " " + names; id_number = number without '<' fillers;
expiry_date = expiration_date YYMMDD read as 20YY-MM-DD (the century rule: an expiry printed on a document in
use falls in 2000-2099), None when it is not six digits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from bench_embedded import readable_refs
from peer_worker import PeerWorker, peer_worker

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure, Record
from pipeline.extract.factory import make_backend
from pipeline.ops.evaluation import EvalItem, load_manifest, normalise
from pipeline.run.engine import Engine
from pipeline.settings import Settings

MRZ_DOC_TYPES = frozenset({"passport", "id_card", "visa"})
WORKER = Path(__file__).resolve().parent / "passporteye_worker.py"
Page = tuple[EvalItem, DocumentRef]


def mrz_pages(manifest: Path) -> tuple[list[Page], int]:
    """Single-image MRZ pages with their truth, and how many MRZ entries were left out (PDF, multi-page TIFF)."""
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    mrz = {(e["path"], int(e.get("page") or 0)) for e in entries if e.get("doc_type") in MRZ_DOC_TYPES}
    single = {ref.rel_path: ref for ref in readable_refs(manifest.parent)
              if ref.page_count == 1 and ref.path.suffix.lower() != ".pdf"}
    pages = [(item, single[item.rel_path]) for item in load_manifest(manifest)
             if (item.rel_path, item.page) in mrz and item.rel_path in single]
    return pages, len(mrz) - len(pages)


def all_right(item: EvalItem, predicted: dict[str, Any]) -> bool:
    return all(normalise(k, predicted.get(k)) == normalise(k, item.truth[k]) for k in FIELD_NAMES)


def idflow_fields(outcome: Record | Failure) -> dict[str, Any]:
    return outcome.extraction.fields if isinstance(outcome, Record) else {}


def passporteye_fields(mrz: dict[str, Any] | None) -> dict[str, Any]:
    """PassportEye's to_dict() subset in the manifest's terms (mapping in the module docstring)."""
    if mrz is None:
        return {}
    expiry = mrz["expiration_date"] or ""
    return {"name": f"{mrz['surname'] or ''} {mrz['names'] or ''}",
            "id_number": (mrz["number"] or "").replace("<", ""),
            "expiry_date": f"20{expiry[:2]}-{expiry[2:4]}-{expiry[4:]}" if len(expiry) == 6 and expiry.isdigit()
            else None}


def read_passporteye(worker: PeerWorker, path: Path) -> tuple[float, dict[str, Any] | None]:
    """Seconds PassportEye spent on the page (timed in the worker) and its MRZ fields."""
    reply = worker.ask(path)
    return reply["ms"] / 1000, reply["mrz"]


async def alternate(pages: list[Page], passporteye: PeerWorker, repeat: int
                    ) -> tuple[list[float], list[float], set[str], set[str]]:
    """Seconds per page for idflow and PassportEye, and the pages each got wrong on any pass."""
    settings = Settings(concurrency=1)
    idflow_times: list[float] = []
    passporteye_times: list[float] = []
    idflow_wrong: set[str] = set()
    passporteye_wrong: set[str] = set()
    async with Engine(settings, make_backend(settings), prepare_workers=1) as engine:
        await engine.one(pages[0][1])  # warm-up for both: a run's engine and a user's PassportEye are warm too
        read_passporteye(passporteye, pages[0][1].path)
        for _ in range(repeat):
            for item, ref in pages:
                started = time.perf_counter()
                outcome = await engine.one(ref)
                idflow_times.append(time.perf_counter() - started)
                seconds, mrz = read_passporteye(passporteye, ref.path)
                passporteye_times.append(seconds)
                if not all_right(item, idflow_fields(outcome)):
                    idflow_wrong.add(item.rel_path)
                if not all_right(item, passporteye_fields(mrz)):
                    passporteye_wrong.add(item.rel_path)
    return idflow_times, passporteye_times, idflow_wrong, passporteye_wrong


def report(label: str, times: list[float], wrong: set[str], pages: int) -> None:
    p90 = statistics.quantiles(times, n=10, method="inclusive")[-1]
    print(f"{label:>20}: median {statistics.median(times) * 1000:6.0f} ms  p90 {p90 * 1000:6.0f} ms  "
          f"all 3 right {pages - len(wrong)}/{pages}  (n={len(times)})")
    if wrong:
        print(f"{'wrong':>20}: {', '.join(sorted(wrong))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest", type=Path, help="manifest.json of tools/make_samples.py --set eval")
    parser.add_argument("--passporteye-python", type=Path, required=True,
                        help="python of the venv where passporteye is installed")
    parser.add_argument("--repeat", type=int, default=3, help="passes over the pages (timing samples per page)")
    args = parser.parse_args()
    pages, skipped = mrz_pages(args.manifest)
    print(f"{len(pages)} MRZ pages x {args.repeat} passes from {args.manifest.parent} ({skipped} MRZ entries "
          f"skipped: PDF or multi-page TIFF), affinity {sorted(os.sched_getaffinity(0))}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load avg {os.getloadavg()}")
    with peer_worker("PassportEye", args.passporteye_python, WORKER, OMP_NUM_THREADS="1",
                     OMP_THREAD_LIMIT="1") as passporteye:
        idflow_times, passporteye_times, idflow_wrong, passporteye_wrong = asyncio.run(
            alternate(pages, passporteye, args.repeat))
    report("idflow embedded", idflow_times, idflow_wrong, len(pages))
    report("PassportEye", passporteye_times, passporteye_wrong, len(pages))
    print(f"ratio of medians (PassportEye / idflow): "
          f"{statistics.median(passporteye_times) / statistics.median(idflow_times):.2f}x  "
          f"load avg after {os.getloadavg()}")


if __name__ == "__main__":
    main()
