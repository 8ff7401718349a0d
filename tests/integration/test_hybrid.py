"""Hybrid backend: OCR first, the VLM (a real chat-completions server on loopback) only for unsettled pages."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.datamodel import DocumentRef, Record
from pipeline.extract.factory import make_backend
from pipeline.ingest.discover import sha256_file
from pipeline.run.engine import Engine
from pipeline.settings import OpenAISettings, Settings
from tests.support.chat_server import VALID_ANSWER, ChatServer, ServerConfig

KEY = "hybrid-test-key-0123456789"


def _ref(path: Path) -> DocumentRef:
    return DocumentRef(path=path, rel_path=path.name, sha256=sha256_file(path))


def test_only_unsettled_pages_reach_the_vlm(sample_dir: Path, tmp_path: Path) -> None:
    blank = tmp_path / "blank_card.png"  # a page the OCR cannot read anything from
    Image.fromarray(np.full((540, 856, 3), 235, np.uint8)).save(blank)
    with ChatServer(ServerConfig(api_key=KEY)) as server:
        settings = Settings(backend="hybrid", concurrency=2,
                            openai=OpenAISettings(api_key=KEY, base_url=server.base_url, model="test-vlm"))

        async def run(paths: list[Path]) -> list:
            async with Engine(settings, make_backend(settings)) as engine:
                return [await engine.one(_ref(p)) for p in paths]

        passport, vlm_page = asyncio.run(run([sample_dir / "passport_td3.jpg", blank]))
        requests = server.chat_requests()

    assert isinstance(passport, Record) and passport.extraction.backend == "hybrid:ocr"
    assert passport.extraction.fields["id_number"] == "UT4815926"
    assert len(requests) == 1, "the passport's MRZ checks settle it: only the blank page is escalated"
    assert isinstance(vlm_page, Record) and vlm_page.extraction.backend == "hybrid:openai"
    assert vlm_page.extraction.fields["id_number"] == VALID_ANSWER["id_number"]
    assert "cross.ocr_vs_vlm" in vlm_page.extraction.check_failures  # the OCR read nothing: no agreement
    # no table is fitted for this model: its values' confidence is unknown, never a number made up for them
    assert all(vlm_page.extraction.field_states[k].confidence is None for k in ("name", "id_number"))


def test_a_model_answer_never_replaces_what_the_ocr_checks_vouch_for(sample_dir: Path) -> None:
    """At a threshold above what the table gives a checked PRC card (0.999) the front and the back are escalated; the
    model answers another person with a valid PRC number. The OCR's values stay, the clash fails the cross-check
    and caps the confidence below the threshold (a person sees it); the back keeps its absent name and its expiry, the answer's
    name and number are not stored over them. The model's tokens are still counted."""
    other = {"doc_type": "cn_id", "name": "李四", "id_number": "11010519491231002X", "expiry_date": None,
             "orientation": "landscape"}
    with ChatServer(ServerConfig(api_key=KEY, default_answer=other)) as server:
        settings = Settings(backend="hybrid", concurrency=2, hybrid_threshold=0.999,
                            openai=OpenAISettings(api_key=KEY, base_url=server.base_url, model="test-vlm"))

        async def run(paths: list[Path]) -> list:
            async with Engine(settings, make_backend(settings)) as engine:
                return [await engine.one(_ref(p)) for p in paths]

        front, back = asyncio.run(run([sample_dir / "cn_front.jpg", sample_dir / "cn_back.jpg"]))
        assert len(server.chat_requests()) == 2

    assert isinstance(front, Record) and isinstance(back, Record)
    assert front.extraction.fields["name"] == "张伟" and front.extraction.fields["id_number"] == "110101199003071233"
    assert "cross.ocr_vs_vlm" in front.extraction.check_failures
    assert front.extraction.field_states["id_number"].confidence <= 0.5  # the disagreement cap
    assert front.extraction.prompt_tokens > 0 and front.extraction.backend == "hybrid:openai"
    assert back.extraction.fields["name"] is None and back.extraction.fields["id_number"] is None
    assert back.extraction.fields["expiry_date"] == "2041-06-15"
