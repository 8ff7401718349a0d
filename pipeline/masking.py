"""Masking of personal data for the console, logs, run summaries and Prefect artifacts (Parquet results keep
the full values).

`redact` is the one function every message, failure detail and log record passes through. It masks what an
identity document's number can look like wherever it appears in free text: PRC resident ID numbers, MRZ
lines, MRZ-style document numbers, the value of any `id_number` key, and the values JSON Schema error messages
quote (`'E1234' does not match ...`). It errs on the side of masking: a stray serial number is masked too.
"""

from __future__ import annotations

import logging
import re

_NOT_ALNUM_BEFORE = r"(?<![0-9A-Za-z])"
_NOT_ALNUM_AFTER = r"(?![0-9A-Za-z])"
# PRC resident ID: 18 characters (17 digits + check digit or X) or the old 15-digit form; also glued to letters
# (`zhang110101199003071233.jpg`: a file named after its holder), not inside a longer run of digits.
_CN_ID = re.compile(r"(?<!\d)(?:\d{17}[\dXx]|\d{15})(?!\d)")
# An MRZ line, whole or cut short by OCR: 20+ characters of A-Z, 0-9 and the filler `<`, with a filler in it.
_MRZ_LINE = re.compile(r"(?<![0-9A-Z<])(?=[0-9A-Z<]*<)[0-9A-Z<]{20,}(?![0-9A-Z<])")
# MRZ-style document numbers: upper-case letters and digits, 6+ long, with a digit and a letter (E12345678,
# ZE000509); all-digit numbers from 9 digits (passport numbers of many states; shorter all-digit tokens are
# counts and sizes too often to mask).
_DOC_NUMBER = re.compile(_NOT_ALNUM_BEFORE + r"(?:(?=[0-9A-Z]*[0-9])(?=[0-9A-Z]*[A-Z])[0-9A-Z]{6,}|[0-9]{9,})"
                         + _NOT_ALNUM_AFTER)
_QUOTED = r"'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\""
# The value of an id_number key in JSON or a Python repr: "id_number": "..." / 'id_number': '...' / id_number=...
_ID_NUMBER_VALUE = re.compile(r"""(?P<key>['"]?(?:id_number|document_number)['"]?\s*[:=]\s*)"""
                              r"(?!(?:None|null)\b)(?P<value>" + _QUOTED + r"|[^\s,;})\]]+)")
# What jsonschema messages quote: the instance, first (`'x' is not of type ...`, `{...} is not valid under ...`),
# and unexpected keys (`Additional properties are not allowed ('x' was unexpected)`).
_SCHEMA_SUBJECT = re.compile(
    r"(?P<subject>" + _QUOTED + r"|\{[^{}\n]*\}|\[[^\[\]\n]*\])"
    r"(?P<verb>\s+(?:is not|is too|does not|should not|should be|is valid|is less|is greater|is expected"
    r"|is a dependency|has non-unique|has too|was unexpected|were unexpected|was expected|is disallowed))")
_LITERAL = re.compile(_QUOTED)
_KEY_NAME = re.compile(r"['\"][a-z_][a-z0-9_]*['\"]")  # 'id_number', 'passport': schema words, kept readable


def mask_id(value: str | None) -> str | None:
    """`110101199003071234` -> `1101**********1234`; short document numbers keep 2 characters each side."""
    if not value:
        return value
    if len(value) <= 2:
        return "*" * len(value)
    keep = 4 if len(value) >= 12 else 2 if len(value) >= 6 else 1
    return value[:keep] + "*" * (len(value) - 2 * keep) + value[-keep:]


def mask_name(value: str | None) -> str | None:
    """`ZHANG SAN` -> `Z**** S**`, `张三` -> `张*`: each word keeps its first character, enough to tell two rows
    apart at a glance and nothing to look a person up by."""
    if not value:
        return value
    return re.sub(r"(?<=\w)\w", "*", value)


def _shape(literal: str) -> str:
    """A quoted value reduced to its shape: `'2030/01/01'` -> `'9999/99/99'`, `'ZHANG'` -> `'xxxxx'`. Enough to
    see why it failed a pattern, nothing of the value."""
    quote, body = literal[0], literal[1:-1]
    return quote + "".join("9" if c.isdigit() else "x" if c.isalnum() else c for c in body) + quote


def _mask_mrz(match: re.Match[str]) -> str:
    line = match.group(0)
    return line[:2] + re.sub(r"[0-9A-Z]", "*", line[2:])


def _mask_id_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if value[:1] in "'\"":
        return match.group("key") + _shape(value)
    return match.group("key") + re.sub(r"[0-9A-Za-z]", "*", value)


def _mask_subject(match: re.Match[str]) -> str:
    def literal(m: re.Match[str]) -> str:
        return m.group(0) if _KEY_NAME.fullmatch(m.group(0)) else _shape(m.group(0))

    return _LITERAL.sub(literal, match.group("subject")) + match.group("verb")


def redact(text: str) -> str:
    """Mask every document number in `text` (see the module docstring); safe on any message."""
    text = _ID_NUMBER_VALUE.sub(_mask_id_value, text)
    text = _SCHEMA_SUBJECT.sub(_mask_subject, text)
    text = _MRZ_LINE.sub(_mask_mrz, text)
    text = _CN_ID.sub(lambda m: mask_id(m.group(0)) or "", text)
    return _DOC_NUMBER.sub(lambda m: mask_id(m.group(0)) or "", text)


class MaskingFilter(logging.Filter):
    """Rewrites log records so a document number that slipped into a message or a traceback never reaches a
    handler (console, file, or Prefect's API log handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install_masking(*logger_names: str) -> None:
    """Attach the masking filter to every handler of the root logger and of `logger_names` (idempotent)."""
    for name in ("", *logger_names):
        for handler in logging.getLogger(name).handlers:
            if not any(isinstance(f, MaskingFilter) for f in handler.filters):
                handler.addFilter(MaskingFilter())
