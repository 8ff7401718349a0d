#!/usr/bin/env python
"""Refit the confidence calibration table (pipeline/calibration_table.json) on tuning manifests.

    python tools/make_samples.py /tmp/tune --set eval --count 120 --seed 101
    python tools/make_samples.py /tmp/tune_hard --set hard --count 120 --seed 101
    python tools/fit_calibration.py /tmp/tune/manifest.json /tmp/tune_hard/manifest.json \\
        --observations /tmp/obs.jsonl --out pipeline/calibration_table.json

Every manifest page is prepared and read by the embedded OCR backend *without* calibration; each present
field becomes one observation (evidence class, raw score, right or wrong: values are never written). Per
class, pool-adjacent-violators gives the isotonic step function from raw score to the share of right values,
each step smoothed as (right + 1) / (seen + 2) so a class seen 40 times right is not called certain.
`--observations` keeps the observations (JSON lines) so a refit from them (`--from-observations`) needs no
OCR. Use tuning seeds only: evaluating on the seeds the table was fitted on would flatter it.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.backends.ocr import OcrBackend  # noqa: E402
from pipeline.calibration import Calibration, evidence_class  # noqa: E402
from pipeline.calibration_fit import fit  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure  # noqa: E402
from pipeline.evaluation import EvalItem, EvalReport, ItemResult, load_manifest, normalise  # noqa: E402
from pipeline.ingest import sha256_file  # noqa: E402
from pipeline.prepare import prepare_page  # noqa: E402


def observe(manifest: Path, today: date, limit: int | None = None) -> list[dict]:
    """One observation per present field of every page of `manifest` (its first `limit` pages)."""
    settings = Settings()
    backend = OcrBackend(today=today, calibrated=False)
    out = []
    items = load_manifest(manifest)[:limit]
    for n, item in enumerate(items, start=1):
        ref = DocumentRef(path=item.path, rel_path=item.rel_path, sha256=sha256_file(item.path), page=item.page)
        prepared = prepare_page(ref, settings.prepare)
        if isinstance(prepared, Failure):
            continue
        ex = backend.read(prepared)
        for name in FIELD_NAMES:
            reading = ex.field_states.get(name)
            if reading is None or reading.state != "present":
                continue
            out.append({"manifest": manifest.parent.name, "condition": item.condition, "field": name,
                        "class": evidence_class(name, ex.fields.get("doc_type"), ex.checks, ex.check_failures),
                        "raw": reading.confidence,
                        "correct": normalise(name, reading.value) == normalise(name, item.truth[name])})
        print(f"\r{manifest.parent.name}: {n}/{len(items)}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return out


def from_report(report: Path) -> list[dict]:
    """Observations from an `idflow eval` report made with raw scores (an empty calibration table)."""
    data = json.loads(report.read_text(encoding="utf-8"))
    return [{"manifest": report.parent.name, "condition": d["condition"], "field": k, "class": cls, "raw": raw,
             "correct": d["correct"][k]} for d in data["documents_scored"] for k, (cls, raw) in d["evidence"].items()]


def check(table: Calibration, report: Path) -> EvalReport:
    """`table` applied to a held-out eval report made with raw scores: the same report `idflow eval` would
    give with that table shipped (an unreadable field counts 0, an absent one 1, failures are not accepted)."""
    results = []
    for d in json.loads(report.read_text(encoding="utf-8"))["documents_scored"]:
        conf = min([table.confidence(cls, raw) for cls, raw in d["evidence"].values()] +
                   [0.0 if s == "unreadable" else 1.0 for k, s in d["states"].items() if k not in d["evidence"]],
                   default=1.0) if not d["failure"] else 0.0
        item = EvalItem(path=Path(d["path"]), rel_path=d["path"], page=0, truth={}, condition=d["condition"])
        results.append(ItemResult(item, {}, d["correct"], [], conf, d["failure"]))
    return EvalReport(results)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("manifests", type=Path, nargs="*")
    ap.add_argument("--from-observations", type=Path, action="append", default=[])
    ap.add_argument("--from-report", type=Path, action="append", default=[],
                    help="observations from an idflow eval report.json made with raw scores (tuning seeds only)")
    ap.add_argument("--check-report", type=Path, action="append", default=[],
                    help="held-out raw-score eval report: print the fitted table's precision/coverage on it")
    ap.add_argument("--observations", type=Path, help="write the observations here (JSON lines)")
    ap.add_argument("--out", type=Path, default=Path("pipeline/calibration_table.json"))
    ap.add_argument("--today", type=date.fromisoformat, default=date.today())
    ap.add_argument("--limit", type=int, default=None, help="read only the first N pages of each manifest")
    args = ap.parse_args(argv)
    if not args.manifests and not args.from_observations and not args.from_report:
        ap.error("give tuning manifests, --from-observations or --from-report")
    observations = [json.loads(x) for p in args.from_observations for x in p.read_text().splitlines() if x]
    observations += [o for p in args.from_report for o in from_report(p)]
    for manifest in args.manifests:
        observations += observe(manifest, args.today, args.limit)
    if args.observations:
        args.observations.write_text("".join(json.dumps(o) + "\n" for o in observations), encoding="utf-8")
    table = fit(observations)
    args.out.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    for name, c in table["classes"].items():
        print(f"{name:40s} n={sum(c['counts']):4d}  " + "  ".join(
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
