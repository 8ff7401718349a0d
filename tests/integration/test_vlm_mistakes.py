"""Every mistake the mistake-making endpoint injects on an MRZ page's document number or expiry date is caught by
the zone's check digit: the field is never proven (`mrz.*_passed`) but disagrees with the zone (never
auto-accepted), or the record fails its checks. One test per mistake kind, over real HTTP through the
OpenAI-compatible backend and the engine, on a generated set."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.ops.evaluation import evaluate, load_manifest
from pipeline.settings import CalibrationSettings, OpenAISettings, Settings
from tests.support.chat_server import ServerConfig
from tests.support.idflow_process import REPO
from tests.support.mistake_server import MistakeConfig, MistakeRates, MistakeServer, index_manifest

KEY = "sk-mistakes-test-2b7c"
SEED = 4343  # declared test seed


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple]:
    folder = tmp_path_factory.mktemp("mistakes")
    subprocess.run([sys.executable, str(REPO / "tools" / "make_samples.py"), str(folder), "--set", "eval",
                    "--count", "40", "--seed", str(SEED)], check=True, capture_output=True)
    manifest = folder / "manifest.json"
    return manifest, index_manifest(manifest, Settings().prepare)


@pytest.mark.parametrize(("kind", "field"), [("substitution", "id_number"), ("neighbour", "id_number"),
                                             ("day_month_swap", "expiry_date"), ("neighbour", "expiry_date")])
def test_every_injected_mistake_on_an_mrz_number_or_date_is_caught(kind: str, field: str,
                                                                   generated: tuple[Path, tuple],
                                                                   tmp_path: Path) -> None:
    manifest, index = generated
    config = MistakeConfig(rates=MistakeRates(**{kind: 1.0}), seed=7, logprobs="ignore",
                           chat=ServerConfig(api_key=KEY, model="mistake-vlm"))
    with MistakeServer(manifest, Settings(), config, index=index) as server:
        settings = Settings(backend="openai", concurrency=4,
                            openai=OpenAISettings(base_url=server.base_url, api_key=KEY, model="mistake-vlm",
                                                  crosscheck=False),  # the zone's digits alone must catch it
                            calibration=CalibrationSettings(dir=tmp_path / "tables", raw_scores=True))
        report = asyncio.run(evaluate(load_manifest(manifest), settings))
        records = server.records()
    results = {(r.item.rel_path, r.item.page): r for r in report.results}
    injected = [rec for rec in records.values() if rec.has_mrz
                and any(m.kind == kind and m.field == field for m in rec.mistakes)]
    assert injected, f"no MRZ page got a {kind} mistake on {field}: the test would prove nothing"
    for rec in injected:
        result = results[(rec.path, rec.page)]
        assert not result.correct[field]  # the mistake is in the stored value
        if result.failure is None:
            cls, _ = result.evidence[field]
            assert cls == f"{field}/disagrees", (rec.path, cls)
        else:
            assert result.failure.startswith("validate/"), (rec.path, result.failure)
