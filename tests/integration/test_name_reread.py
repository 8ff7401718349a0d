"""The printed-name second reading (pipeline/extract/ocr/name_reread.py) end to end with the real RapidOCR models, on
generated small captures (thumbnail-size photos: the printed name ~10 px tall) whose first pass misreads the printed
name, so the zone's name is left unconfirmed."""

from __future__ import annotations

import random
from datetime import date

from pipeline.datamodel import DocumentRef
from pipeline.extract.ocr import backend as ocr
from pipeline.extract.ocr import name_reread, page_read
from pipeline.ingest.discover import sha256_file
from pipeline.prepare import prepare_page
from pipeline.settings import Settings
from synth import conditions as C
from synth import hard as H
from synth import render as R
from synth.identities import random_mrz_person
from synth.sample_set import _render_kind, _rng

TODAY = date(2026, 11, 30)


def _prepared(tmp_path, seed: int, index: int, kind: str, condition: str):  # noqa: ANN202
    """Item `index` of the hard set of `seed` (as `tools/make_samples.py --set hard` writes it), prepared as a
    run prepares it; and its truth."""
    rng = _rng(seed, "hard", index)
    rendered, _person = _render_kind(kind, rng)
    return _written(tmp_path, rendered, condition, rng), rendered


def _written(tmp_path, rendered: R.Rendered, condition: str, rng: random.Random):  # noqa: ANN202
    transform, fmt, quality, _ = H.HARD_CONDITIONS[condition]
    path = tmp_path / f"page{C.FORMATS[fmt]}"
    path.write_bytes(C.encode(transform(rendered, rng), fmt, quality=quality))
    ref = DocumentRef(path=path, rel_path=path.name, sha256=sha256_file(path), page=0)
    return prepare_page(ref, Settings().prepare)


def _first_pass(pixels):  # noqa: ANN001, ANN202
    """The first pass and the MRZ second reading, without the name re-read."""
    lines, first = page_read.read_lines(pixels, TODAY)
    if ocr.needs_second_reading(first):
        first, lines = ocr.second_reading(pixels, lines, first, TODAY)
    return first


def _confirmed_by_the_reread(prepared, truth) -> None:  # noqa: ANN001
    """The first pass (and the MRZ second reading) alone decode the zone but do not confirm its name; the whole
    backend, re-read included, gives the same check a first-pass confirmation gives, and the right name."""
    pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
    first = _first_pass(pixels)
    assert "mrz.number" in first.checks
    assert "cross.name_mrz_vs_viz" not in first.checks
    assert name_reread.needs_reread(first) and name_reread.poor_capture(pixels, max(prepared.original_size))
    extraction = ocr.OcrBackend(today=TODAY).read(prepared)
    assert "cross.name_mrz_vs_viz" in extraction.checks
    assert extraction.fields["name"] == truth.name
    assert extraction.fields["id_number"] == truth.id_number


def test_a_thumbnail_passport_whose_printed_name_the_first_pass_misreads_is_confirmed_by_the_reread(tmp_path):
    truth = R.passport_td3(random_mrz_person(random.Random(110), "passport"))
    _confirmed_by_the_reread(_written(tmp_path, truth, "thumbnail", random.Random(110)), truth)


def test_a_thumbnail_td2_card_whose_printed_name_the_first_pass_misreads_is_confirmed_by_the_reread(tmp_path):
    _confirmed_by_the_reread(*_prepared(tmp_path, 102, 30, "td2", "thumbnail"))


def test_a_large_well_lit_page_is_never_re_read(tmp_path):
    """The pass is for dark or small captures only: a sharp 1250 px render is not one, whatever its reading."""
    prepared, _ = _prepared(tmp_path, 102, 1, "passport", "motion_blur")
    pixels = prepared.full_pixels if prepared.full_pixels is not None else prepared.pixels
    assert not name_reread.poor_capture(pixels, max(prepared.original_size))
