"""`idflow calibrate` fits the table of one backend + model + prompt from a labelled manifest against a loopback
endpoint, and a later run of the same backend + model + prompt scores with it (confidence present, records
auto-accepted), while a run with another model id does not (confidence unknown, every record to a person)."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pipeline.datamodel import FIELD_NAMES, DocumentRef, Failure
from pipeline.extract.model.openai_compat import encode_jpeg
from pipeline.ingest.discover import sha256_file
from pipeline.ops.evaluation import load_manifest
from pipeline.prepare import prepare_page
from pipeline.review.queue import record_confidence
from pipeline.settings import Settings
from pipeline.store.parquet import RESULTS, read_table
from tests.support.chat_server import ChatServer, ServerConfig, image_sha256
from tests.support.idflow_process import REPO, run_env

KEY = "sk-calibrate-test-5e8a1f"
SEED = 4242  # declared test seed (not an evaluation seed of any figure)


@pytest.fixture(scope="module")
def labelled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated set with ground truth: its manifest."""
    folder = tmp_path_factory.mktemp("labelled")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), str(folder), "--set", "eval",
                    "--count", "200", "--seed", str(SEED)], check=True, capture_output=True)
    return folder / "manifest.json"


def truth_answers(manifest: Path) -> dict[str, dict[str, Any]]:
    """The right answer for every page, keyed as the server sees it (the sha256 of the JPEG a run sends)."""
    answers = {}
    items = json.loads(manifest.read_text(encoding="utf-8"))
    items = items["items"] if isinstance(items, dict) else items
    by_path = {it["path"]: it for it in items}
    prepare = Settings().prepare
    for item in load_manifest(manifest):
        ref = DocumentRef(item.path, item.rel_path, sha256_file(item.path), item.page)
        page = prepare_page(ref, prepare, keep_full=False)
        if isinstance(page, Failure):
            continue
        entry = by_path[item.rel_path]
        answers[image_sha256(encode_jpeg(page.pixels))] = {
            "doc_type": entry.get("doc_type") or "unknown", **{k: item.truth[k] for k in FIELD_NAMES},
            "orientation": entry.get("orientation") or "landscape", "mrz": None, "printed": None}
    return answers


def calibrate(manifest: Path, server: ChatServer, tables: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    # the embedded second reading is not what this file proves (tests/integration/test_vlm_crosscheck.py is)
    env = run_env(tmp_path, TAOTOKEN_BASE_URL=server.base_url, TAOTOKEN_API_KEY=KEY,
                  TAOTOKEN_MODEL=server.config.model, IDFLOW_CALIBRATION_DIR=str(tables),
                  IDFLOW_OPENAI_CROSSCHECK="false")
    return subprocess.run([sys.executable, "-m", "idflow", "calibrate", str(manifest), "--backend", "openai"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)


def run_folder(inbox: Path, out: Path, server: ChatServer, tables: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    from flows.extract import extract_folder

    monkeypatch.setenv("TAOTOKEN_BASE_URL", server.base_url)
    monkeypatch.setenv("TAOTOKEN_API_KEY", KEY)
    monkeypatch.setenv("TAOTOKEN_MODEL", server.config.model)
    monkeypatch.setenv("IDFLOW_CALIBRATION_DIR", str(tables))
    monkeypatch.setenv("IDFLOW_OPENAI_CROSSCHECK", "false")  # as calibrate() above
    summary = asyncio.run(extract_folder(str(inbox), str(out), backend="openai", concurrency=4))
    assert summary["accounted"]
    table = read_table(out, RESULTS)
    assert table is not None
    return table.to_pylist()


def test_calibrate_then_run_uses_the_table_of_its_key_only(labelled: Path, prefect_api: str, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    answers = truth_answers(labelled)
    tables = tmp_path / "tables"
    with ChatServer(ServerConfig(api_key=KEY, model="test-vlm", answers=answers)) as server:
        done = calibrate(labelled, server, tables, tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "per evidence class" in done.stdout and "95% interval" in done.stdout
        assert "precision/coverage" in done.stdout and "99.5%" in done.stdout
        (stored,) = tables.glob("*.json")
        key = json.loads(stored.read_text(encoding="utf-8"))["key"]
        assert key == {"backend": "openai", "model": "test-vlm", "prompt": "extract_v3.en"}

        inbox = tmp_path / "in"
        shutil.copytree(labelled.parent, inbox)
        rows = run_folder(inbox, tmp_path / "out", server, tables, monkeypatch)
    assert rows and all(r["calibration"] and r["calibration"].startswith("openai/test-vlm/extract_v3.en#")
                        for r in rows)
    assert all(r[f"{k}_confidence"] is not None for r in rows for k in FIELD_NAMES if r[f"{k}_state"] == "present")
    accepted = [r for r in rows if record_confidence(r) >= 0.95]
    assert len(accepted) >= len(rows) // 3, f"{len(accepted)} of {len(rows)} auto-accepted"

    with ChatServer(ServerConfig(api_key=KEY, model="other-vlm", answers=answers)) as other:
        rows = run_folder(inbox, tmp_path / "out-other", other, tables, monkeypatch)
    # No table for this model: test-vlm's is not used; a field has a confidence only where the embedded path's
    # table gives it one (the floor: the answer's own check digits, or the embedded OCR reading the same value)
    assert rows and all(r["calibration"] is None or r["calibration"].startswith("floor:ocr/") for r in rows)
    assert all(r["calibration"] is not None for r in rows for k in FIELD_NAMES
               if r[f"{k}_state"] == "present" and r[f"{k}_confidence"] is not None)
    assert all(record_confidence(r) == 0.0 for r in rows if r["calibration"] is None)  # to a person


def test_calibrate_refuses_too_few_documents(tmp_path: Path, labelled: Path) -> None:
    small = tmp_path / "small.json"
    items = json.loads(labelled.read_text(encoding="utf-8"))
    items = items["items"] if isinstance(items, dict) else items
    small.write_text(json.dumps(items[:10]), encoding="utf-8")
    with ChatServer(ServerConfig(api_key=KEY, model="test-vlm")) as server:
        env = run_env(tmp_path, TAOTOKEN_BASE_URL=server.base_url, TAOTOKEN_API_KEY=KEY, TAOTOKEN_MODEL="test-vlm",
                      IDFLOW_CALIBRATION_DIR=str(tmp_path / "tables"))
        done = subprocess.run([sys.executable, "-m", "idflow", "calibrate", str(small), "--backend", "openai",
                               "--root", str(labelled.parent)], env=env, cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
    assert done.returncode == 2
    assert len([line for line in done.stdout.splitlines() if line.strip()]) == 1, done.stdout
    assert "at least 40" in done.stdout and not (tmp_path / "tables").exists()
    assert server.chat_requests() == []  # refused before anything is sent
