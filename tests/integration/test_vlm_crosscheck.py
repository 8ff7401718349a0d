"""`IDFLOW_OPENAI_CROSSCHECK`: the embedded OCR reads a VLM answer's unproven fields again, over real HTTP from the
mistake-making endpoint, on a generated set of real images. A PRC card's name has no check digit, so a name the
model got wrong is caught only by the second reading: every injected name mistake on a PRC card disagrees with it
(never auto-accepted), an invented expiry on a card front the OCR sees none on disagrees too, and a right name the
OCR reads alike gets the class of two agreeing readings (`+ocr`) that a table can learn to trust. Without the
setting, the same answers carry no such evidence."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.ops.evaluation import EvalReport, evaluate, load_manifest
from pipeline.settings import CalibrationSettings, OpenAISettings, Settings
from tests.support.chat_server import ServerConfig
from tests.support.idflow_process import REPO
from tests.support.mistake_server import MistakeConfig, MistakeRates, MistakeServer, index_manifest

KEY = "sk-crosscheck-test-5d1e"
SEED = 4343  # declared test seed
PRC = "cn_id"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple]:
    folder = tmp_path_factory.mktemp("crosscheck")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), str(folder), "--set", "eval",
                    "--count", "20", "--seed", str(SEED)], check=True, capture_output=True)
    manifest = folder / "manifest.json"
    return manifest, index_manifest(manifest, Settings().prepare)


def run(generated: tuple[Path, tuple], tmp_path: Path, crosscheck: bool) -> tuple[EvalReport, dict]:
    manifest, index = generated
    config = MistakeConfig(rates=MistakeRates(substitution=0.5, invented=0.5), seed=11, logprobs="ignore",
                           chat=ServerConfig(api_key=KEY, model="crosscheck-vlm"))
    with MistakeServer(manifest, Settings(), config, index=index) as server:
        settings = Settings(backend="openai", concurrency=4,
                            openai=OpenAISettings(base_url=server.base_url, api_key=KEY, model="crosscheck-vlm",
                                                  crosscheck=crosscheck),
                            calibration=CalibrationSettings(dir=tmp_path / "tables", raw_scores=True))
        report = asyncio.run(evaluate(load_manifest(manifest), settings))
        return report, server.records()


def test_the_ocr_reading_catches_what_no_check_can_and_vouches_for_what_it_reads_alike(
        generated: tuple[Path, tuple], tmp_path: Path) -> None:
    report, records = run(generated, tmp_path, crosscheck=True)
    results = {(r.item.rel_path, r.item.page): r for r in report.results}
    prc = [rec for rec in records.values() if rec.doc_type == PRC]
    wrong_names = [rec for rec in prc if any(m.field == "name" for m in rec.mistakes)]
    invented = [rec for rec in prc if any(m.kind == "invented" and m.field == "expiry_date" for m in rec.mistakes)]
    right_names = [rec for rec in prc if results[(rec.path, rec.page)].item.truth.get("name") and not rec.mistakes]
    assert wrong_names and invented and right_names, "the set must hold each case, or the test proves nothing"
    for rec in wrong_names:
        result = results[(rec.path, rec.page)]
        if result.failure is None:  # else an invented number failed MOD 11-2: the page is in the failure queue
            assert not result.correct["name"]
            assert result.evidence["name"][0] == "name/disagrees", rec.path
    for rec in invented:
        result = results[(rec.path, rec.page)]
        if result.failure is None:
            assert result.evidence["expiry_date"][0] == "expiry_date/disagrees", rec.path
    agreeing = [rec for rec in right_names if results[(rec.path, rec.page)].failure is None
                and results[(rec.path, rec.page)].evidence["name"][0].endswith("+ocr/nolp")]
    # the OCR reads nearly every clean generated card front: a second reading that never agrees is no evidence
    assert len(agreeing) >= len(right_names) - 1, (len(agreeing), len(right_names))
    for rec in agreeing:
        assert results[(rec.path, rec.page)].correct["name"]
    # a page whose zone proves every field is not read again: its classes carry no OCR evidence
    for rec in records.values():
        result = results[(rec.path, rec.page)]
        if rec.has_mrz and not rec.mistakes and result.failure is None:
            assert not any("+ocr" in cls for cls, _ in result.evidence.values()
                           if cls.startswith(("id_number/", "expiry_date/"))), rec.path


def test_without_the_setting_a_wrong_prc_name_has_no_evidence_against_it(generated: tuple[Path, tuple],
                                                                         tmp_path: Path) -> None:
    report, records = run(generated, tmp_path, crosscheck=False)
    results = {(r.item.rel_path, r.item.page): r for r in report.results}
    wrong = [rec for rec in records.values() if rec.doc_type == PRC and any(m.field == "name" for m in rec.mistakes)]
    assert wrong
    classes = {results[(rec.path, rec.page)].evidence["name"][0] for rec in wrong
               if results[(rec.path, rec.page)].failure is None}
    assert classes and not any(c.endswith("/disagrees") or "+ocr" in c for c in classes), classes
