#!/usr/bin/env python
"""The tuning folders the shipped confidence table is fitted on, each with the generator call that makes it.

    python tools/tuning_sets.py DIR [--jobs 2]        # make every folder under DIR (a folder already made is kept)
    python tools/tuning_sets.py DIR --manifests       # only print their manifest paths, one a line

Reading every tuning page again with today's reader (after a change to what a reader records) and refitting:

    python tools/tuning_sets.py /tmp/tune --jobs 2
    python tools/fit_calibration.py $(python tools/tuning_sets.py /tmp/tune --manifests) --jobs 2 \\
        --observations /tmp/observations.jsonl.gz --out /tmp/table.json    # 4,864 pages: about 80 minutes
    # then: mv /tmp/observations.jsonl.gz data/calibration_observations.jsonl.gz and refit from it

Folder names are the `manifest` of every committed observation (`data/calibration_observations.jsonl.gz`), so a
test holds the observations and this list to each other. Seeds are 101-120 only: every other seed is for evaluation.
The generator's output is a pure function of its arguments, so a folder made here holds the pages observed.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_samples  # noqa: E402

TUNING_SEEDS = range(101, 121)


@dataclass(frozen=True)
class TuningSet:
    """One tuning folder: `name` (the observations' `manifest`), the generator's set, count, seed, conditions
    and kinds, and doc types left out of its manifest (pages of other classes a set was not made for)."""

    name: str
    set_: str
    count: int
    seed: int
    conditions: str | None = None
    kinds: str | None = None
    without: tuple[str, ...] = ()  # doc types (prefixes) dropped from the manifest

    def argv(self, out: Path, jobs: int = 1) -> list[str]:
        """The `tools/make_samples.py` arguments that make this folder in `out`."""
        args = [str(out), "--set", self.set_, "--count", str(self.count), "--seed", str(self.seed)]
        args += ["--conditions", self.conditions] if self.conditions else []
        args += ["--kinds", self.kinds] if self.kinds else []
        return args + ["--jobs", str(jobs)]

    def keeps(self, entry: dict) -> bool:
        """Whether a manifest entry of the generated folder is one this set observes."""
        return not any(entry["doc_type"].startswith(prefix) for prefix in self.without)


_BLUR = "motion_blur,dark_phone,occlusion,thumbnail"
_FRONTS = "fr_front,de_front,nl_front,it_front,es_front"

TUNING_SETS: tuple[TuningSet, ...] = (
    TuningSet("e101", "eval", 91, 101),
    TuningSet("e102", "eval", 120, 102),
    TuningSet("e103", "eval", 37, 103),
    TuningSet("h101", "hard", 63, 101),
    TuningSet("h102", "hard", 120, 102),
    TuningSet("e104", "eval", 240, 104, kinds="cn_back,cn_both"),  # PRC backs
    TuningSet("h104thumb", "hard", 120, 104, conditions="thumbnail"),  # 300-360 px phone thumbnails
    TuningSet("h105zone", "hard", 360, 105,  # zone-only and covered-print pages
              conditions="printed_covered,infrared,glare_printed,mrz_strip"),
    TuningSet("e105cnlt", "eval", 210, 105, kinds="cn_back_long_term"),  # 长期 backs
    TuningSet("e106cnf", "eval", 30, 106, kinds="cn_front"),  # PRC fronts
    TuningSet("h106blur", "hard", 240, 106, conditions=_BLUR, without=("cn_",)),  # blurred, dark, occluded zones
    TuningSet("h107blur", "hard", 240, 107, conditions=_BLUR, without=("cn_",)),
    TuningSet("e107fr", "eval", 300, 107, kinds="fr_cni_1988"),  # both sides of the French 1988 card
    TuningSet("e108fr", "eval", 60, 108, kinds="fr_cni_1988"),
    TuningSet("h111cnblur", "hard", 200, 111, conditions="motion_blur,dark_phone", kinds="cn_front,cn_both"),
    TuningSet("h112cn", "hard", 150, 112, kinds="cn_front"),  # PRC fronts under every hard condition
    TuningSet("e113fronts", "eval", 300, 113, kinds=_FRONTS),  # card fronts of the known issuers
    TuningSet("e113alb", "eval", 150, 113, kinds="alb_template"),  # Albanian fronts on the MIDV-2020 template
    TuningSet("e113frstamp", "eval", 330, 113, kinds="fr_cni_1988_stamped"),  # issue date under a stamp
    TuningSet("h114cnshake", "hard", 320, 114, conditions="motion_blur", kinds="cn_front,cn_both"),
    # more shaken PRC fronts: their two name classes reach the observations every shipped class needs
    TuningSet("h116cnshake", "hard", 560, 116, conditions="motion_blur", kinds="cn_front,cn_both"),
    TuningSet("h117cnshake", "hard", 160, 117, conditions="motion_blur", kinds="cn_front,cn_both"),
    # Croatian and Czech fronts, the US passport card, the UK licence front
    TuningSet("e115fronts", "eval", 304, 115, kinds="hr_front,cz_front,uk_licence_front,us_passport_card"),
)


def make(tuning: TuningSet, out: Path, jobs: int = 1) -> Path:
    """Make `tuning`'s folder at `out` (its pages kept as they are when its manifest exists) and leave in its
    manifest only the pages the set observes; the manifest's path."""
    manifest = out / "manifest.json"
    if not manifest.exists() and make_samples.main(tuning.argv(out, jobs)) != 0:
        raise RuntimeError(f"{tuning.name}: the generator failed")
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    kept = [e for e in entries if tuning.keeps(e)]
    if len(kept) < len(entries):
        manifest.write_text(json.dumps(kept, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return manifest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", type=Path, help="folder to make the tuning folders in, one a set")
    ap.add_argument("--manifests", action="store_true", help="print the manifest paths only, make nothing")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes of the generator")
    args = ap.parse_args(argv)
    for tuning in TUNING_SETS:
        out = args.root / tuning.name
        print(out / "manifest.json" if args.manifests else make(tuning, out, args.jobs), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
