"""`IDFLOW_OPENAI_CROSSCHECK`: the embedded OCR reads a VLM answer's unproven fields again, over real HTTP from the
mistake-making endpoint, on a generated set of real images. A PRC card's name has no check digit, so a name the
model got wrong is caught only by the second reading: every injected name mistake on a PRC card disagrees with it
(never auto-accepted), an invented expiry on a card front the OCR sees none on disagrees too, and a right name the
OCR reads alike gets the class of two agreeing readings (`+ocr`) that a table can learn to trust. Without the
setting, the same answers carry no such evidence.

The floor rule, with no table for the model: a field read alike gets at least the confidence the embedded table
gives the OCR's own reading of it (measured by reading the same page with the embedded backend), a field the
answer's check digits prove gets the embedded table's confidence for that class, and a field the two read
otherwise gets none."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef, PreparedImage
from pipeline.extract.ocr.backend import OcrBackend
from pipeline.ingest.containers import page_count
from pipeline.ingest.discover import sha256_file
from pipeline.ops.evaluation import EvalReport, evaluate, load_manifest
from pipeline.prepare import prepare_page
from pipeline.settings import CalibrationSettings, OpenAISettings, Settings
from pipeline.trust import table as calibration
from pipeline.trust.table import Trust
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


def run(generated: tuple[Path, tuple], tmp_path: Path, crosscheck: bool, *, raw: bool = True,
        rates: MistakeRates | None = None) -> tuple[EvalReport, dict]:
    """`raw`: raw scores (what a table is fitted on); else scored with no table for the model (an empty
    calibration directory), as a new model id is."""
    manifest, index = generated
    config = MistakeConfig(rates=rates or MistakeRates(substitution=0.5, invented=0.5), seed=11, logprobs="ignore",
                           chat=ServerConfig(api_key=KEY, model="crosscheck-vlm"))
    with MistakeServer(manifest, Settings(), config, index=index) as server:
        settings = Settings(backend="openai", concurrency=4,
                            openai=OpenAISettings(base_url=server.base_url, api_key=KEY, model="crosscheck-vlm",
                                                  crosscheck=crosscheck),
                            calibration=CalibrationSettings(dir=tmp_path / "tables", raw_scores=raw))
        report = asyncio.run(evaluate(load_manifest(manifest), settings))
        return report, server.records()


@functools.cache
def embedded_reading(path: Path, page_no: int) -> dict:
    """The embedded backend's own scored reading of a page prepared as a VLM run prepares it (read once a page:
    a page with several fields read alike is asked for each)."""
    prepare = Settings().prepare
    ref = DocumentRef(path, path.name, sha256_file(path), page=page_no, page_count=page_count(path, prepare))
    page = prepare_page(ref, prepare, keep_full=False)
    assert isinstance(page, PreparedImage)
    return Trust(None)(OcrBackend().read(page)).field_states  # scored as the validate stage scores it


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


def test_with_no_table_a_field_read_alike_gets_at_least_the_embedded_confidence_and_a_disagreement_none(
        generated: tuple[Path, tuple], tmp_path: Path) -> None:
    report, records = run(generated, tmp_path, crosscheck=True, raw=False)
    shipped = calibration.shipped()
    alike, proven, disagreeing = [], [], []
    for result in report.results:
        for name, (cls, confidence) in result.evidence.items():
            if "+ocr/" in cls:
                alike.append((result, name, confidence))
            elif cls.endswith("/disagrees"):
                disagreeing.append((result, name, confidence))
            elif cls.startswith(("id_number/mrz.number_passed/", "expiry_date/mrz.expiry_passed/")):
                proven.append((cls, confidence))
    assert alike and proven and disagreeing, "the set must hold each case, or the test proves nothing"
    for result, name, confidence in alike:
        own = embedded_reading(result.item.path, result.item.page)[name]
        assert own.value is not None and confidence is not None and confidence >= own.confidence, \
            (result.item.rel_path, name, confidence, own)
        assert result.correct[name], result.item.rel_path  # the injected mistakes never read alike here
    for cls, confidence in proven:
        assert confidence == shipped.confidence(cls.rsplit("/", 1)[0], 1.0) >= 0.95, cls
    for result, name, confidence in disagreeing:
        assert confidence is None, (result.item.rel_path, name, confidence)
    # a field only the model read (the OCR could not read it, or no reading ran) stays unknown: to a person
    for result in report.results:
        for name, (cls, confidence) in result.evidence.items():
            if "+ocr/" not in cls and not cls.startswith(("id_number/mrz.", "expiry_date/mrz.", "name/mrz.",
                                                          "id_number/cn.passed/")):
                assert confidence is None, (result.item.rel_path, name, cls, confidence)


def test_a_right_answer_for_the_sample_passport_whose_zone_passes_is_sure_with_no_table(tmp_path: Path) -> None:
    manifest, root = REPO / "data" / "sample_ground_truth.json", REPO / "data" / "sample"
    index = index_manifest(manifest, Settings().prepare, root)
    config = MistakeConfig(rates=MistakeRates(), seed=1, logprobs="answer",
                           chat=ServerConfig(api_key=KEY, model="new-model-id"))
    with MistakeServer(manifest, Settings(), config, index=index, root=root) as server:
        settings = Settings(backend="openai", concurrency=2,
                            openai=OpenAISettings(base_url=server.base_url, api_key=KEY, model="new-model-id"),
                            calibration=CalibrationSettings(dir=tmp_path / "tables"))
        items = [i for i in load_manifest(manifest, root) if i.rel_path == "passport_td3.jpg"]
        report = asyncio.run(evaluate(items, settings))
    (result,) = report.results
    assert all(result.correct.values())
    for name in ("name", "id_number"):
        cls, confidence = result.evidence[name]
        assert confidence is not None and confidence >= 0.95, (name, cls, confidence)
