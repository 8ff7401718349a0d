"""Masking of personal data for logs, run names and Prefect artifacts (Parquet keeps the full values)."""

from __future__ import annotations

import logging
import re

_CN_ID = re.compile(r"(?<![0-9A-Za-z])(\d{4})(\d{10})(\d{3}[\dXx])(?![0-9A-Za-z])")


def mask_id(value: str | None) -> str | None:
    """`110101199003071234` -> `1101**********1234`; short document numbers keep 2 characters each side."""
    if not value:
        return value
    keep = 4 if len(value) >= 12 else 2 if len(value) >= 6 else 1
    return value[:keep] + "*" * (len(value) - 2 * keep) + value[-keep:]


def mask_text(text: str) -> str:
    """Mask every PRC ID number inside free text (a second line of defence for log messages)."""
    return _CN_ID.sub(lambda m: f"{m.group(1)}{'*' * 10}{m.group(3)}", text)


def redact(text: str) -> str:
    """The one redaction applied to every detail and message that leaves the Parquet results."""
    return mask_text(text)


class MaskingFilter(logging.Filter):
    """Rewrites log records so an ID number that slipped into a message never reaches a handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def install_masking(*logger_names: str) -> None:
    """Attach the masking filter to every handler of the root logger and of `logger_names` (idempotent)."""
    for name in ("", *logger_names):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, MaskingFilter) for f in handler.filters):
                handler.addFilter(MaskingFilter())
