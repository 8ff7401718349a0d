#!/usr/bin/env python
"""Generate synthetic identity-document specimens.

    python tools/make_samples.py data/sample                      # the committed sample set
    python tools/make_samples.py /tmp/eval --set eval --count 300 --seed 7 [--jobs 2]
    python tools/make_samples.py /tmp/hard --set hard --count 120 --seed 101 [--conditions glare] [--kinds cn_front]

The hard set (synth/hard.py: watermark, glare, hologram, dark phone photo, 512 px, motion blur, JPEG 15,
moiré, occluded MRZ line, photos at 90/180/270, the zone alone) is tuning material: tune on seed 101, evaluate on 202.
Opt-in conditions (`--conditions`) add what real captures show: a printed zone covered by callouts, stamps or
specimen words, an infrared reader image, glare over the printed fields, 600 px scans, booklet spreads, camera
previews, thumbnails, a zone at 90°. Tuning kinds make rare evidence classes in quantity: `--kinds cn_back_long_term`
(长期 card backs), `fr_cni_1988_stamped` (a French 1988 back whose issue date is under a stamp), `alb_template`
(Albanian fronts on the MIDV-2020 template, read from ../shared/realdata or SYNTH_TEMPLATE_DIR).

The output is a pure function of (--set, --count, --seed): re-running gives byte-identical files.
The sample set writes ground_truth.json, the eval set manifest.json (same shape plus "condition").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from synth.hard import HARD_CONDITIONS  # noqa: E402
from synth.sample_set import KINDS, OPT_IN_KINDS, SAMPLE_SEED, TUNING_KINDS, build_eval, build_hard, build_sample  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--set", dest="set_", choices=("sample", "eval", "hard"), default="sample")
    ap.add_argument("--count", type=int, default=300, help="documents in the eval set (ignored for sample)")
    ap.add_argument("--seed", type=int, default=None, help=f"default: {SAMPLE_SEED} (sample) / 7 (eval)")
    ap.add_argument("--conditions", default=None, help="hard set only: comma-separated condition names")
    ap.add_argument("--kinds", default=None,
                    help="comma-separated document kinds (eval set default: all but the opt-in national cards "
                         f"{', '.join(OPT_IN_KINDS)} and the tuning kind {', '.join(TUNING_KINDS)}; same set per seed)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes for the eval set")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    if args.set_ == "sample":
        truth = build_sample(args.out_dir, SAMPLE_SEED if args.seed is None else args.seed)
        what = f"{args.out_dir.name}_ground_truth.json beside it"
    else:
        if args.count < 1:
            ap.error("--count must be >= 1")
        if args.set_ == "hard":
            names = args.conditions.split(",") if args.conditions else None
            if names and set(names) - set(HARD_CONDITIONS):
                ap.error(f"--conditions: choose from {', '.join(HARD_CONDITIONS)}")
            kinds = args.kinds.split(",") if args.kinds else None
            if kinds and set(kinds) - set(KINDS):
                ap.error(f"--kinds: the hard set makes {', '.join(KINDS)}")
            try:
                truth = build_hard(args.out_dir, args.count, 101 if args.seed is None else args.seed,
                                   jobs=args.jobs, conditions=names, kinds=kinds)
            except ValueError as e:
                ap.error(str(e))
        else:
            kinds = args.kinds.split(",") if args.kinds else None
            if kinds and set(kinds) - set(KINDS) - set(OPT_IN_KINDS) - set(TUNING_KINDS):
                ap.error(f"--kinds: choose from {', '.join(KINDS + OPT_IN_KINDS + TUNING_KINDS)}")
            truth = build_eval(args.out_dir, args.count, 7 if args.seed is None else args.seed, jobs=args.jobs,
                               kinds=kinds)
        what = "manifest.json"
    files = [p for p in args.out_dir.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"{args.set_}: {len(truth)} entries, {len(files)} files, {size / 1e6:.2f} MB in {args.out_dir} "
          f"({what}) in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
