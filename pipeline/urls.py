"""Base URLs in the settings: an http(s) URL with a host, checked when the settings are read, so a mistyped one
(`not a url`, `ftp//host/api`) is a configuration error before any document is touched, not a run whose every
document fails as `endpoint_unavailable`."""

from __future__ import annotations

from pydantic import HttpUrl, TypeAdapter, ValidationError

_HTTP_URL: TypeAdapter[HttpUrl] = TypeAdapter(HttpUrl)


def http_base_url(value: str, setting: str) -> str:
    """`value` stripped when it is an http(s) URL with a host; else ValueError naming `setting` (never the value:
    a URL may carry credentials)."""
    url = value.strip()
    try:
        parsed = _HTTP_URL.validate_python(url)
    except ValidationError:
        parsed = None
    if parsed is None or not parsed.host or "://" not in url:
        raise ValueError(f"{setting} must be an http(s) URL with a host, such as https://taotoken.net/api")
    return url
