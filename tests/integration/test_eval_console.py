"""`idflow eval` prints its misses masked: the console is a log, and a manifest holds real people's names and
numbers (the full values are in REPORT_DIR/report.json)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.paths import REPO

WRONG_NAME = "QUARTERMAINE ROSALIND"  # the page shows another name: the reading is a miss on both fields
WRONG_NUMBER = "XK7730261"


def test_misses_on_the_console_mask_names_and_numbers(tmp_path: Path) -> None:
    truth = json.loads((REPO / "data" / "sample_ground_truth.json").read_text(encoding="utf-8"))
    entry = next(e for e in truth if e["path"] == "passport_td3.jpg")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{**entry, "name": WRONG_NAME, "id_number": WRONG_NUMBER}]), encoding="utf-8")
    report = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "idflow", "eval", str(manifest), str(report),
                           "--root", str(REPO / "data" / "sample")], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "ph"),
                               "PYTHONPATH": str(REPO), "COLUMNS": "200"}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    console = done.stdout + done.stderr
    misses = [line for line in console.splitlines() if "miss:" in line]
    assert misses, console  # the reading disagrees with the altered truth
    assert WRONG_NAME not in console and WRONG_NUMBER not in console
    assert entry["name"] not in console and entry["id_number"] not in console
    assert "Q*********** R*******" in console  # masked, not dropped
    saved = json.loads((report / "report.json").read_text(encoding="utf-8"))
    assert saved["misses"][0]["name"]["truth"] == WRONG_NAME  # the report keeps the full values


def test_eval_says_what_holds_documents_back(tmp_path: Path) -> None:
    """Per capture condition and per evidence class, with the observations the shipped table has of each class."""
    truth = json.loads((REPO / "data" / "sample_ground_truth.json").read_text(encoding="utf-8"))
    entry = next(e for e in truth if e["path"] == "passport_td3.jpg")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps([{**entry, "condition": "bench-scan"}]), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "idflow", "eval", str(manifest), str(tmp_path / "report"),
                           "--root", str(REPO / "data" / "sample")], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "ph"),
                               "PYTHONPATH": str(REPO), "COLUMNS": "240"}, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    saved = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    assert saved["per_condition_at_threshold"]["bench-scan"]["documents"] == 1
    classes = saved["per_evidence_class"]
    assert {cls.split("/")[0] for cls in classes} == {"name", "id_number", "expiry_date"}
    from pipeline.trust.table import shipped

    number_class = next(cls for cls in classes if cls.startswith("id_number/"))
    observed = sum(shipped().curves[number_class].counts)
    row = next(line for line in done.stdout.splitlines() if number_class in line)
    assert str(observed) in row.split(), row  # the table's observations of the class, as the table file has them
    assert "per capture condition" in done.stdout and "bench-scan" in done.stdout
