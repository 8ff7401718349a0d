"""The VLM path's auto-accept target (issue 29): calibrate on a tuning set, measure on a fresh one.

Usage: taskset -c 1 python bench/bench_vlm_trust.py [--tune-count 300] [--eval-count 200]
       [--tune-seed 121] [--eval-seed 9301] [--error-rate 0.05] [--uniform] [--no-crosscheck] [--no-table]
       [--modes 'logprobs,no logprobs'] [--work /tmp/vlm-trust]

1. Generates a tuning set (`make_samples.py --set eval`, a tuning seed) and a fresh evaluation set (another seed).
2. Per mode (with and without token log-probabilities): serves the tuning set from the mistake-making endpoint
   (tests/support/mistake_server.py, mistakes at `--error-rate` per field: `rates`), runs `idflow calibrate` on
   it, then serves the evaluation set (other mistakes: another server seed) and runs `idflow eval` on it with
   the fitted table. Both are the commands a user runs, as subprocesses.
3. Prints, per mode, precision at the review threshold (0.95) and the share of documents auto-accepted, overall
   and per doc_type, and the 99.5% operating point. Goal: precision >= 99.5% and >= 80% auto-accepted in both.

`--no-table` skips step 2's `idflow calibrate`: the model has no table, so every confidence comes from the
embedded floor (`pipeline.trust.table.floored`) or stays unknown, as for a new model id. The embedded second
reading is on, as by default; `--no-crosscheck` runs with `IDFLOW_OPENAI_CROSSCHECK=false`.

Without log-probabilities the share is limited by what the documents themselves can prove: a PRC card's name or
its back's expiry date has no check digit, so those fields are only as sure as the model's average reading.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.settings import Settings  # noqa: E402
from tests.support.chat_server import ServerConfig  # noqa: E402
from tests.support.mistake_server import MistakeConfig, MistakeRates, MistakeServer, index_manifest  # noqa: E402

KEY = "sk-bench-vlm-trust"
MODEL = "bench-vlm"


def generate(folder: Path, count: int, seed: int) -> Path:
    manifest = folder / "manifest.json"
    if not manifest.is_file():
        subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), str(folder), "--set", "eval",
                        "--count", str(count), "--seed", str(seed)], check=True)
    return manifest


def idflow(args: list[str], server: MistakeServer, tables: Path, logprobs: bool, crosscheck: bool, log: Path) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDFLOW_", "TAOTOKEN_"))}
    env.update(TAOTOKEN_BASE_URL=server.base_url, TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL=MODEL,
               IDFLOW_CALIBRATION_DIR=str(tables), IDFLOW_OPENAI_LOGPROBS="true" if logprobs else "false",
               IDFLOW_OPENAI_CROSSCHECK="true" if crosscheck else "false",
               PYTHONPATH=str(REPO), COLUMNS="160")
    with log.open("w") as out:
        return subprocess.run([sys.executable, "-m", "idflow", *args], env=env, stdout=out,
                              stderr=subprocess.STDOUT).returncode


def children_cpu() -> float:
    """CPU seconds (user + system) of the finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rates(per_field: float, uniform: bool) -> MistakeRates:
    """Every kind at `per_field` (`uniform`: a field reached by two kinds then errs about twice as often), or
    split so each field errs at about `per_field`: two kinds reach each present field (name: substitution and
    truncation; number: substitution and neighbour; expiry: swapped day/month and neighbour), each at half;
    an invented value for an absent field and a wrong zone line at the full rate."""
    if uniform:
        return MistakeRates.uniform(per_field)
    half = per_field / 2
    return MistakeRates(substitution=half, truncation=half, neighbour=half, day_month_swap=half,
                        invented=per_field, mrz_line=per_field)


def serve(manifest: Path, index: tuple, mistakes: MistakeRates, seed: int) -> MistakeServer:
    config = MistakeConfig(rates=mistakes, seed=seed, logprobs="answer", chat=ServerConfig(api_key=KEY, model=MODEL))
    return MistakeServer(manifest, Settings(), config, index=index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tune-count", type=int, default=300)
    parser.add_argument("--eval-count", type=int, default=200)
    parser.add_argument("--tune-seed", type=int, default=121, help="a tuning seed")
    parser.add_argument("--eval-seed", type=int, default=9301, help="a fresh seed, never used for tuning")
    parser.add_argument("--error-rate", type=float, default=0.05, help="mistakes per field (see `rates`)")
    parser.add_argument("--uniform", action="store_true", help="every mistake kind at --error-rate instead")
    parser.add_argument("--no-crosscheck", dest="crosscheck", action="store_false",
                        help="IDFLOW_OPENAI_CROSSCHECK=false: the embedded OCR does not read the fields no check "
                             "proves")
    parser.add_argument("--no-table", action="store_true",
                        help="no idflow calibrate: no table for the model (the embedded floor alone)")
    parser.add_argument("--modes", default="logprobs,no logprobs", help="which of 'logprobs', 'no logprobs'")
    parser.add_argument("--work", type=Path, default=Path("/tmp/vlm-trust"))
    args = parser.parse_args()
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    tune = None if args.no_table else generate(work / f"tune-{args.tune_seed}", args.tune_count, args.tune_seed)
    held = generate(work / f"eval-{args.eval_seed}", args.eval_count, args.eval_seed)
    prepare = Settings().prepare
    started = time.perf_counter()
    tune_index = index_manifest(tune, prepare) if tune is not None else ({}, [])
    eval_index = index_manifest(held, prepare)
    print(f"indexed {len(tune_index[0])} + {len(eval_index[0])} pages in {time.perf_counter() - started:.0f} s",
          flush=True)
    figures = {}
    mistakes = rates(args.error_rate, args.uniform)
    tag = (f"{'uniform' if args.uniform else 'field'}{args.error_rate:g}{'-ocr' if args.crosscheck else ''}"
           f"{'-notable' if args.no_table else ''}")
    print(f"mistake rates ({tag}): {mistakes}", flush=True)
    wanted = {m.strip() for m in args.modes.split(",")}
    for mode, logprobs in [(m, lp) for m, lp in (("logprobs", True), ("no logprobs", False)) if m in wanted]:
        tables = work / f"tables-{tag}-{'lp' if logprobs else 'nolp'}"
        if not args.no_table:
            with serve(tune, tune_index, mistakes, seed=args.tune_seed) as server:
                code = idflow(["calibrate", str(tune), "--backend", "openai"], server, tables, logprobs,
                              args.crosscheck, work / f"calibrate-{tag}-{mode.replace(' ', '-')}.log")
            if code != 0:
                raise SystemExit(f"idflow calibrate failed ({mode}): see {work}")
        out = work / f"eval-out-{tag}-{mode.replace(' ', '-')}"
        with serve(held, eval_index, mistakes, seed=args.eval_seed) as server:
            begun, cpu = time.perf_counter(), children_cpu()
            code = idflow(["eval", str(held), str(out), "--backend", "openai"], server, tables, logprobs,
                          args.crosscheck, work / f"eval-{tag}-{mode.replace(' ', '-')}.log")
            took, cpu = time.perf_counter() - begun, children_cpu() - cpu
            injected = sum(len(r.mistakes) for r in server.records().values())
        if code != 0:
            raise SystemExit(f"idflow eval failed ({mode}): see {work}")
        report = json.loads((out / "report.json").read_text(encoding="utf-8"))
        figures[mode] = report
        at, point = report["at_threshold"], report["operating_point"]
        fitted = "no table for the model" if args.no_table else f"table fitted on tuning seed {args.tune_seed}"
        print(f"\n== {mode}: evaluation set seed {args.eval_seed} ({report['documents']} documents, "
              f"{injected} injected mistakes), {fitted}; idflow eval took {took:.0f} s, "
              f"{cpu / report['documents']:.2f} s CPU a document")
        print(f"field accuracy {report['accuracy']:.2%} (per field: {report['per_field']}); at threshold {at['threshold']:.2f}: "
              f"{at['share']:.1%} of documents auto-accepted ({at['accepted']}), precision {at['precision']:.2%}")
        print("99.5% operating point: " + (f"threshold {point['threshold']:.4f}, coverage {point['coverage']:.1%}"
                                           if point else "none"))
        for kind, row in report["per_doc_type"].items():
            print(f"  {kind:24} {row['documents']:4} documents, {row['share']:6.1%} auto-accepted, "
                  f"precision {row['precision']:.2%}")
    goal = all(f["at_threshold"]["precision"] >= 0.995 and f["at_threshold"]["share"] >= 0.80
               for f in figures.values())
    print(f"\ngoal (precision >= 99.5% and >= 80% auto-accepted in both modes): {'met' if goal else 'NOT met'}")


if __name__ == "__main__":
    main()
