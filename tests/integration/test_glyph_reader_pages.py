"""The zone name's second reader (`mrz_glyphs`) on a generated page, read end to end by the real RapidOCR models:
an underexposed phone photo of a visa lying on a dark table, the page a tuning set holds (hard seed 106, page 24).
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from pipeline.datamodel import DocumentRef
from pipeline.extract.ocr import mrz_glyphs
from pipeline.extract.ocr.backend import OcrBackend
from pipeline.formats.zone import NAME_TWO_READERS_CHECK
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.settings import Settings
from synth.sample_set import _hard_worker


def test_a_dark_photo_is_read_against_the_cards_paper_not_the_table(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Beside the card the table is darker than half the strip's median: taken against its own background, its
    sensor noise is as dark as the print and the name line is cut wrong, a disagreement with the right name; taken
    against the card's paper the two readers agree."""
    truth = _hard_worker((24, "visa", "dark_phone", 106, str(tmp_path)))[0]
    path = tmp_path / truth["path"]
    page = prepare_page(DocumentRef(path=path, rel_path=truth["path"], sha256=sha256_file(path), page=0),
                        Settings().prepare)
    backend = OcrBackend(today=date(2026, 12, 6))
    read = backend.read(page)
    assert read.fields["name"] == truth["name"]
    assert NAME_TWO_READERS_CHECK in read.checks
    monkeypatch.setattr(mrz_glyphs, "_PAPER", 0.0)
    unpapered = backend.read(page)
    assert unpapered.fields["name"] == truth["name"]
    assert NAME_TWO_READERS_CHECK in unpapered.check_failures
