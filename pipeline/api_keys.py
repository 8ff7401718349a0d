"""What an API key may look like once read from the environment, `.env` or a console paste.

Why a check and not just `strip()`: a key is sent in an HTTP header, and a key with a newline, a space or an
invisible character (U+200B from a web console) inside cannot be; the HTTP library then fails with an error
that quotes the header, key included, and that error would travel into the failure queue and the logs as a
retryable outage. Refused up front, as a configuration error that names the setting and never the value.
"""

from __future__ import annotations

import re

_SENDABLE = re.compile(r"[\x21-\x7e]*")  # visible ASCII: what an Authorization header can carry unchanged


def clean_api_key(value: object) -> object:
    """A pydantic `before` validator: surrounding whitespace (a pasted newline) is dropped; whitespace, control
    or non-ASCII characters inside are a `ValueError` whose message does not contain the key."""
    if not isinstance(value, str):
        return value
    key = value.strip()
    if not _SENDABLE.fullmatch(key):
        raise ValueError("the key contains whitespace, control or non-ASCII characters (a bad paste?): copy it "
                         "again from the provider console")
    return key
