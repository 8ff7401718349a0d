"""tools/fit_calibration.py refits the calibration table from observations when started as a script."""

from __future__ import annotations

import json
import subprocess
import sys

from pipeline.calibration import Calibration
from tests.support.paths import REPO


def test_refit_from_observations_runs_as_a_script(tmp_path):
    obs = tmp_path / "obs.jsonl"
    obs.write_text("".join(json.dumps({"class": "name/printed", "raw": r / 10, "correct": r > 4, "manifest": "t"})
                           + "\n" for r in range(10)))
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(REPO / "tools" / "fit_calibration.py"), "--from-observations", str(obs),
                    "--out", str(out)], check=True, capture_output=True)
    loaded = Calibration.load(out)
    assert loaded.confidence("name/printed", 0.9) > loaded.confidence("name/printed", 0.1)
