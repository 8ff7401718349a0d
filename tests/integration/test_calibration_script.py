"""tools/fit_calibration.py refits the calibration table from observations when started as a script."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from pipeline.trust.table import Calibration
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


def test_refit_redraws_classes_states_intervals_and_keys_the_table(tmp_path):
    """`--reclass` redraws each observation's class from its doc type and checks (a change to the classes needs
    no new OCR); the table states per class the observations, right count and 95% interval, and its key."""
    rows = [{"manifest": "t", "path": f"p{i}.png", "page": 0, "field": "expiry_date", "doc_type": "cn_id",
             "checks": ["cn_id.validity_range", "cn_id.validity_span"], "failures": [],
             "class": "expiry_date/cn.validity", "raw": 0.99, "correct": i != 0} for i in range(80)]
    rows.append({"manifest": "t", "path": "empty.png", "page": 0, "condition": "clean", "field": None})  # marker
    obs = tmp_path / "obs.jsonl"
    obs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "table.json"
    done = subprocess.run([sys.executable, str(REPO / "tools" / "fit_calibration.py"), "--from-observations",
                           str(obs), "--reclass", "--out", str(out)], check=True, capture_output=True, text=True)
    table = json.loads(out.read_text())
    assert table["key"]["backend"] == "ocr" and table["key"]["model"].startswith("rapidocr-")
    assert table["key"]["prompt"] is None and table["observations"] == 80
    stated = table["classes"]["expiry_date/cn.validity_span"]
    assert (stated["observations"], stated["right_total"]) == (80, 79)
    low, high = stated["interval95"]
    assert 0.93 < low < 79 / 80 < high < 1.0
    assert "expiry_date/cn.validity_span" in done.stdout and "right=   79" in done.stdout


def test_gzip_observations_one_member_a_page_and_a_cut_page_is_dropped(tmp_path):
    """The committed observations are gzip-compressed; each page is appended as a member of its own, so a run
    killed while writing one loses that page only: the refit reads the pages before it."""
    import gzip

    obs = tmp_path / "obs.jsonl.gz"
    for i in range(12):
        before = obs.stat().st_size if obs.exists() else 0
        with gzip.open(obs, "at", encoding="utf-8") as f:
            f.write(json.dumps({"class": "name/printed", "raw": 0.9, "correct": True, "manifest": "t",
                                "path": f"p{i}.png", "page": 0, "field": "name"}) + "\n")
    whole = obs.read_bytes()
    obs.write_bytes(whole[:before + (len(whole) - before) // 2])  # the last page's member cut in half
    out = tmp_path / "table.json"
    subprocess.run([sys.executable, str(REPO / "tools" / "fit_calibration.py"), "--from-observations", str(obs),
                    "--out", str(out)], check=True, capture_output=True)
    assert json.loads(out.read_text())["observations"] == 11


def test_observations_appended_page_by_page_are_rewritten_as_one_stream(tmp_path):
    """Once every page is in, the observations file is one gzip member with every row (markers too), in order:
    a member per page compresses each page alone."""
    import gzip
    import importlib.util
    import zlib

    spec = importlib.util.spec_from_file_location("fit_calibration", REPO / "tools" / "fit_calibration.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    obs = tmp_path / "obs.jsonl.gz"
    rows = [{"manifest": "t", "path": f"p{i}.png", "page": 0, "field": "name" if i % 3 else None, "raw": i / 40}
            for i in range(40)]
    for row in rows:
        script.append_observations(obs, [row])
    appended = obs.stat().st_size
    script.compact_observations(obs)
    unpacked = zlib.decompressobj(wbits=31)
    text = unpacked.decompress(obs.read_bytes())
    assert unpacked.eof and unpacked.unused_data == b""  # one member, nothing after it
    assert [json.loads(line) for line in text.decode().splitlines()] == rows
    assert obs.stat().st_size < appended / 3
    assert json.loads(gzip.decompress(obs.read_bytes()).decode().splitlines()[-1]) == rows[-1]
    assert [p.name for p in tmp_path.iterdir()] == ["obs.jsonl.gz"]


def test_pages_read_by_two_workers_are_observed_as_one_process_observes_them(tmp_path):
    """`--jobs 2` reads a manifest's pages in two worker processes and appends their observations in the
    manifest's order, the same rows one process writes (the re-read of every tuning page uses both cores)."""
    folder = tmp_path / "sample"  # the bundled samples, their ground truth as the manifest
    shutil.copytree(REPO / "data" / "sample", folder)
    shutil.copy(REPO / "data" / "sample_ground_truth.json", folder / "manifest.json")

    def one_core() -> None:  # one recogniser thread, as each worker runs: the same arithmetic, the same scores
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    written = {}
    for jobs in (1, 2):
        obs = tmp_path / f"obs{jobs}.jsonl"
        subprocess.run([sys.executable, str(REPO / "tools" / "fit_calibration.py"), str(folder / "manifest.json"),
                        "--limit", "2", "--jobs", str(jobs), "--observations", str(obs),
                        "--out", str(tmp_path / f"table{jobs}.json")], check=True, capture_output=True,
                       preexec_fn=one_core if jobs == 1 else None)
        written[jobs] = [json.loads(line) for line in obs.read_text(encoding="utf-8").splitlines()]
    pages = [(r["path"], r["page"]) for r in written[1]]
    assert len(set(pages)) == 2 and written[1][0]["manifest"] == "sample"
    assert written[2] == written[1]
