"""What the VLM path's embedded second reading costs on real pages, and what switching it off does.

Usage: python bench/bench_vlm_second_reading.py [--realdata ../shared/realdata] [--repeat 2] [--work /tmp/vlm-2nd]

Serves the shared real specimens (`eval_manifest.json`) from the mistake-making endpoint without mistakes (every
answer right, its zone rebuilt from the truth with passing check digits, as a model that reads the page well
answers), with no table for the model, and runs `idflow eval` on them with the second reading on
(`IDFLOW_OPENAI_CROSSCHECK=true`, the default) and off, alternately (A B A B). Prints per run the CPU of the
whole `idflow eval` process a page, the share of documents auto-accepted at 0.95 and their precision; and the
second reading's CPU a page (on minus off, same session). The specimens' doc types are mapped to the project's
(TD3 -> passport, TD1/TD2 and national cards -> id_card, MRV-A/B -> visa) in a manifest written to `--work`
with absolute paths, so the specimens are read where they are, never copied.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.settings import Settings  # noqa: E402
from tests.support.chat_server import ServerConfig  # noqa: E402
from tests.support.mistake_server import MistakeConfig, MistakeRates, MistakeServer, index_manifest  # noqa: E402

KEY = "sk-bench-second-reading"
MODEL = "bench-new-model"
DOC_TYPES = {"TD3": "passport", "passport": "passport", "TD1": "id_card", "TD2": "id_card", "id_card": "id_card",
             "FRA_ID_1988": "id_card", "MRVA": "visa", "MRVB": "visa", "cn_id": "cn_id"}


def mapped_manifest(realdata: Path, work: Path) -> Path:
    entries = json.loads((realdata / "eval_manifest.json").read_text(encoding="utf-8"))
    out = [{**e, "path": str((realdata / e["path"]).resolve()), "doc_type": DOC_TYPES.get(e.get("doc_type"),
                                                                                           e.get("doc_type"))}
           for e in entries]
    path = work / "realdata_manifest.json"
    path.write_text(json.dumps(out, ensure_ascii=False, indent=1), encoding="utf-8")
    return path


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(manifest: Path, server: MistakeServer, out: Path, crosscheck: bool) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IDFLOW_", "TAOTOKEN_"))}
    env.update(TAOTOKEN_BASE_URL=server.base_url, TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL=MODEL,
               IDFLOW_CALIBRATION_DIR=str(out / "no-tables"), IDFLOW_OPENAI_CROSSCHECK=str(crosscheck).lower(),
               PYTHONPATH=str(REPO), COLUMNS="160")
    before = children_cpu()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run([sys.executable, "-m", "idflow", "eval", str(manifest), str(out), "--backend", "openai"],
                       env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    return children_cpu() - before, json.loads((out / "report.json").read_text(encoding="utf-8"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--realdata", type=Path, default=REPO.parent / "shared" / "realdata")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path("/tmp/vlm-2nd"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    manifest = mapped_manifest(args.realdata, args.work)
    index = index_manifest(manifest, Settings().prepare)
    config = MistakeConfig(rates=MistakeRates(), seed=1, logprobs="answer", chat=ServerConfig(api_key=KEY, model=MODEL))
    cpu: dict[bool, list[float]] = {True: [], False: []}
    with MistakeServer(manifest, Settings(), config, index=index) as server:
        for i in range(args.repeat):
            for crosscheck in (True, False):
                spent, report = run(manifest, server, args.work / f"out-{'on' if crosscheck else 'off'}-{i}",
                                    crosscheck)
                pages = report["documents"]
                cpu[crosscheck].append(spent / pages)
                at = report["at_threshold"]
                print(f"second reading {'on ' if crosscheck else 'off'}: {pages} documents, {spent / pages:.2f} s "
                      f"CPU a page; {at['share']:.1%} auto-accepted at {at['threshold']:.2f} ({at['accepted']}), "
                      f"precision {at['precision']:.2%}; fields {report['accuracy']:.1%}", flush=True)
    on, off = min(cpu[True]), min(cpu[False])
    print(f"\nthe second reading: {on - off:.2f} s CPU a page on average (best runs: {on:.2f} on, {off:.2f} off)")


if __name__ == "__main__":
    main()
