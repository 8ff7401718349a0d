"""tools/tuning_sets.py: the recipe of the tuning folders the shipped table is fitted on."""

from __future__ import annotations

import gzip
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

SCRIPT = REPO / "tools" / "tuning_sets.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("tuning_sets", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tuning_sets"] = module  # a dataclass looks its module up while it is made
    spec.loader.exec_module(module)
    return module


def test_the_recipe_names_exactly_the_folders_of_the_committed_observations(tmp_path):
    """Every committed observation comes from a folder the recipe makes, every folder it makes was observed, and
    all of them from tuning seeds: a refit from the recipe reads the pages the table was fitted on."""
    printed = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--manifests"], check=True,
                             capture_output=True, text=True).stdout.split()
    assert all(Path(p).name == "manifest.json" and Path(p).parent.parent == tmp_path for p in printed)
    assert not any(tmp_path.iterdir()), "--manifests makes nothing"
    with gzip.open(REPO / "data" / "calibration_observations.jsonl.gz", "rt", encoding="utf-8") as f:
        observed = {json.loads(line)["manifest"] for line in f if line.strip()}
    assert sorted(Path(p).parent.name for p in printed) == sorted(observed)
    module = _module()
    assert all(t.seed in module.TUNING_SEEDS for t in module.TUNING_SETS)


def test_a_set_made_twice_is_the_same_and_keeps_only_the_doc_types_it_observes(tmp_path):
    """A set that leaves PRC cards out writes a manifest without them, its other pages as the generator made
    them; making it again keeps the folder as it is."""
    module = _module()
    recipe = next(t for t in module.TUNING_SETS if t.without)
    small = module.TuningSet(recipe.name, recipe.set_, 9, recipe.seed, recipe.conditions, recipe.kinds,
                             recipe.without)
    manifest = module.make(small, tmp_path / "made")
    kept = json.loads(manifest.read_text(encoding="utf-8"))
    subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), *small.argv(tmp_path / "plain")],
                   check=True, capture_output=True)
    plain = json.loads((tmp_path / "plain" / "manifest.json").read_text(encoding="utf-8"))
    assert kept == [e for e in plain if not e["doc_type"].startswith(recipe.without)]
    assert 0 < len(kept) < len(plain)
    assert all((manifest.parent / e["path"]).read_bytes() == (tmp_path / "plain" / e["path"]).read_bytes()
               for e in kept)
    before = manifest.stat().st_mtime_ns
    assert module.make(small, tmp_path / "made") == manifest and manifest.stat().st_mtime_ns == before
