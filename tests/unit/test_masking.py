"""`redact`: every shape a document number takes in a message is masked; ordinary log text is left alone."""

from __future__ import annotations

import logging

import pytest

from pipeline.masking import MaskingFilter, mask_id, redact
from pipeline.run.report import masked_rows, summary_markdown
from pipeline.validate import schema_errors


def test_mask_id() -> None:
    assert mask_id("11010519491231002X") == "1101**********002X"
    assert mask_id("ZE000509") == "ZE****09"
    assert mask_id("AB") == "**"
    assert mask_id(None) is None


@pytest.mark.parametrize(("text", "secret"), [
    ("id 11010519491231002X ok", "11010519491231002X"),  # PRC ID, 18
    ("old card 110105491231002", "110105491231002"),  # PRC ID, 15
    ("zhang11010519491231002X.jpg", "0519491231"),  # glued to a holder's name in a file name
    ("extract in_11010519491231002X (2 files)", "0519491231"),  # a folder name, in a flow run's name
    ("P<CHNZHANG<<SAN<<<<<<<<<<<<<<<<<<<<<<<<<<<<<", "ZHANG"),  # MRZ line 1 (name)
    ("E123456786CHN9001017M3101012<<<<<<<<<<<<<<04", "12345678"),  # MRZ line 2 (number, birth date)
    ("passport E12345678 expired", "12345678"),  # MRZ-style document number
    ("scan ZE000509.jpg", "000509"),
    ("number 123456789 on file", "3456"),  # all-digit passport number
    ('{"id_number": "AB12", "name": "x"}', "AB12"),  # a short number under its key, JSON
    ("{'id_number': 'ab12'}", "ab12"),  # and a Python repr
])
def test_redact_masks_document_numbers(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked and masked != text


def test_redact_masks_values_quoted_by_schema_errors() -> None:
    fields = {"doc_type": "Z9Q", "name": "ZHANG SAN", "id_number": "e7351x", "expiry_date": "2030/01/01",
              "orientation": "landscape", "G7654": 1}
    errors = schema_errors(fields)
    assert len(errors) == 4 and any("e7351x" in e for e in errors)  # jsonschema does quote them
    masked = [redact(e) for e in errors]
    for secret in ("e7351x", "2030/01/01", "Z9Q", "G7654"):
        assert all(secret not in m for m in masked), (secret, masked)
    assert "expiry_date: '9999/99/99' is not valid under any of the given schemas" in masked  # shape kept


def test_redact_leaves_ordinary_text_alone() -> None:
    text = ("run 3fa85f64 (flow run 0d2f7c1e-1b7e-4c1a-9d55-4f0e2c7a9b10): seen=1200 results=1180; "
            "Qwen/Qwen3-VL-8B-Instruct HTTP/1.1 500 at 2026-11-30 22:36:45; reason too_many_pixels; "
            "id_number: None; 'id_number' is a required property")
    assert redact(text) == text


def test_filter_masks_messages_and_tracebacks(caplog) -> None:
    logger = logging.getLogger("idflow.test.masking")
    handler_filter = MaskingFilter()
    with caplog.at_level(logging.INFO, logger="idflow.test.masking"):
        caplog.handler.addFilter(handler_filter)
        try:
            logger.info("read %s", "11010519491231002X")
            try:
                raise ValueError("bad number E98765432")
            except ValueError:
                logger.exception("batch crashed")
        finally:
            caplog.handler.removeFilter(handler_filter)
    assert "11010519491231002X" not in caplog.text and "98765432" not in caplog.text
    assert "1101**********002X" in caplog.text and "E9*****32" in caplog.text


def test_artifact_rows_and_summary_mask_paths_and_details() -> None:
    rows = masked_rows([{"source_path": "in/E98765432.jpg", "detail": "id_number: 'e9876543x' does not match",
                         "id_number": "11010519491231002X"}], ("source_path", "detail", "id_number"))
    assert "98765432" not in str(rows) and "9876543" not in str(rows) and "1231002" not in str(rows)
    summary = {"run_id": "r1", "backend": "ocr", "model": "m", "seen": 0, "results": 0, "failures": 0,
               "skipped": 0, "accounted": True, "failures_by_reason": {}, "skipped_by_reason": {},
               "visual_tokens": 0, "prompt_tokens": 0, "completion_tokens": 0, "estimated_cost": 0,
               "latency_ms_p50": 0, "latency_ms_p95": 0, "elapsed_s": 0, "docs_per_s": 0}
    assert "98765432" not in summary_markdown(summary, input_dir="/in/G98765432", out_dir="/out")
