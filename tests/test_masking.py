from __future__ import annotations

import logging

from pipeline.masking import MaskingFilter, mask_id, mask_text


def test_mask_id() -> None:
    assert mask_id("11010519491231002X") == "1101**********002X"
    assert mask_id("ZE000509") == "ZE****09"
    assert mask_id(None) is None


def test_mask_text_and_filter(caplog) -> None:
    assert mask_text("id 11010519491231002X ok") == "id 1101**********002X ok"
    logger = logging.getLogger("idflow.test.masking")
    handler_filter = MaskingFilter()
    with caplog.at_level(logging.INFO, logger="idflow.test.masking"):
        caplog.handler.addFilter(handler_filter)
        try:
            logger.info("read %s", "11010519491231002X")
        finally:
            caplog.handler.removeFilter(handler_filter)
    assert "11010519491231002X" not in caplog.text
    assert "1101**********002X" in caplog.text
