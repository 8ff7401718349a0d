"""What a failed chat-completions call means for the pipeline: reason code, retry policy, one-line fix.

Shared by the OpenAI-compatible backend (retry/breaker decisions, Failure.detail) and `pipeline.ops.doctor`
(which adds probes on top), so a user sees the same diagnosis in the failure queue and in `idflow doctor`.
"""

from __future__ import annotations

import email.utils
import re
import time
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import urlsplit, urlunsplit

import openai

from pipeline.datamodel import Reason

_TOO_LARGE = re.compile(r"too (large|big|long)|exceed|maximum context|max_pixels|context length", re.I)
_IMAGE = re.compile(r"image|base64|data:|mime|media", re.I)
_MODEL_MISSING = re.compile(r"model.*(not (be )?found|does not exist|not exist|unknown)|model_not_found", re.I)

RESIZE_FIX = "image too large for the endpoint: lower IDFLOW_MAX_PIXELS and/or IDFLOW_MAX_LONG_EDGE"
IMAGE_FIX = ("image refused: the model must accept images, sent as data:image/<type>;base64,... "
             "with a MIME that matches the bytes")


@dataclass(frozen=True, slots=True)
class RequestError:
    """A classified failure of one HTTP attempt."""

    reason: Reason
    detail: str  # one line: what happened
    status: int | None = None
    fix: str = ""  # one line: what to change, when we know
    retryable: bool = False  # worth another attempt for the same document
    endpoint_down: bool = False  # counts towards the circuit breaker
    fatal: bool = False  # will fail every document the same way (key, path, model): stop sending
    retry_after: float | None = None  # seconds the server asked us to wait

    @property
    def diagnosis(self) -> str:
        return f"{self.detail} -- {self.fix}" if self.fix else self.detail


def redact(text: str, secret: str) -> str:
    """`text` without the key (some servers echo the offered key in their 401 message)."""
    return text.replace(secret, "***") if secret else text


def public_url(url: str) -> str:
    """The URL without user:password@, safe for logs, results and diagnoses."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def host_port(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """`Retry-After` (seconds or HTTP date) or `retry-after-ms`, as seconds; None when absent or unreadable."""
    if (ms := headers.get("retry-after-ms")) is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        return None if parsed is None else max(0.0, email.utils.mktime_tz(parsed) - time.time())


def server_message(exc: openai.APIStatusError) -> str:
    """The provider's error message on one line, shortened; falls back to the raw body."""
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        message = (inner.get("message") or inner.get("detail")) if isinstance(inner, dict) else inner
    else:
        message = body
    text = " ".join(str(message if message is not None else exc.message).split())
    return text[:300]


def is_model_missing(status: int, message: str) -> bool:
    return status in (400, 404) and bool(_MODEL_MISSING.search(message))


def is_too_large(status: int, message: str) -> bool:
    return status == 413 or (status == 400 and bool(_TOO_LARGE.search(message)))


def path_fix(base_url: str) -> str:
    """Why the chat route 404s: the SDK appends `/chat/completions` to the base URL as given."""
    path = urlsplit(base_url).path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "remove /chat/completions from the base URL: the SDK appends it"
    if path.endswith("/v1/v1"):
        return "the base URL has /v1 twice: keep one"
    if path.endswith("/v1"):
        return "the base URL ends in /v1, which this provider does not use (TaoToken: https://taotoken.net/api)"
    return "the base URL may need /v1 at the end (vLLM and most self-hosted servers: http://host:8000/v1)"


def _connection_refused(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError) or "connection refused" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def classify(exc: openai.OpenAIError, *, base_url: str, model: str, secret: str = "",
             url_setting: str = "TAOTOKEN_BASE_URL") -> RequestError:
    """Map an SDK exception to a reason code and policy. `base_url` must already be public; `secret` (the
    key) is removed from anything the server said; `url_setting` is the setting a fix tells the user to change."""
    if isinstance(exc, openai.APITimeoutError):
        return timed_out(base_url)
    if isinstance(exc, openai.APIConnectionError):
        where = host_port(base_url)
        if not _connection_refused(exc):
            cause = exc.__cause__ or exc
            said = " ".join(str(cause).split()) or type(cause).__name__  # a reset mid-body says nothing
            return RequestError(Reason.ENDPOINT_UNAVAILABLE, redact(f"connection to {where} failed: {said}", secret),
                                retryable=True, endpoint_down=True)
        fix = (f"nothing listens on {where}: start the local server (vllm serve ... --port "
               f"{where.rsplit(':', 1)[1]}) or point {url_setting} at a running one") if is_local(base_url) \
            else f"check the host and port in {url_setting}"
        return RequestError(Reason.ENDPOINT_UNAVAILABLE, f"connection refused by {where}", fix=fix,
                            retryable=True, endpoint_down=True)
    if not isinstance(exc, openai.APIStatusError):
        return RequestError(Reason.BAD_REQUEST, f"{type(exc).__name__}: {exc}")
    message = redact(server_message(exc), secret)
    return _classify_status(exc.status_code, message, exc.response.headers, base_url, model)


def timed_out(base_url: str) -> RequestError:
    """No complete answer within the request timeout (the SDK's per-read timeout, or the whole-request deadline
    a slowly trickling answer runs into)."""
    return RequestError(Reason.TIMEOUT, f"no answer from {base_url} within the request timeout",
                        retryable=True, endpoint_down=True)


def not_a_completion(base_url: str, what: str) -> RequestError:
    """An HTTP 200 whose body is not a chat completion (a proxy's HTML page, broken bytes, wrong types): the
    endpoint is misbehaving, not the document, so it is a retryable server error that counts towards the breaker."""
    return RequestError(Reason.SERVER_ERROR, f"the answer from {base_url} is not a chat completion ({what})",
                        fix="check that TAOTOKEN_BASE_URL points at the API itself, not a web page or proxy",
                        retryable=True, endpoint_down=True)


def _classify_status(status: int, message: str, headers: Mapping[str, str], base_url: str,
                     model: str) -> RequestError:
    said = f"HTTP {status} from {base_url}: {message}"
    if status == 429:
        return RequestError(Reason.RATE_LIMITED, said, status, retryable=True,
                            retry_after=retry_after_seconds(headers))
    if status >= 500 or status in (408, 409):
        return RequestError(Reason.SERVER_ERROR, said, status, retryable=True, endpoint_down=status >= 500,
                            retry_after=retry_after_seconds(headers))
    if 300 <= status < 400:
        where = headers.get("location") or "another address"
        return RequestError(Reason.BAD_REQUEST, said, status, f"the endpoint redirects to {where}: point the base "
                            "URL there (redirects are not followed: the page would go to a host nobody configured)",
                            fatal=True)
    if status in (401, 403):
        fix = ("the API key was rejected (unset, stale, revoked or pasted with extra characters): "
               "run `idflow doctor`") if status == 401 else "the key has no access to this model or endpoint"
        return RequestError(Reason.AUTH_ERROR, said, status, fix, fatal=True)
    if is_model_missing(status, message):
        return RequestError(Reason.BAD_REQUEST, said, status, f"the endpoint does not offer model {model!r}: set "
                            "TAOTOKEN_MODEL to an id from GET /models (not a local --served-model-name)", fatal=True)
    if status == 404:
        return RequestError(Reason.BAD_REQUEST, said, status, path_fix(base_url), fatal=True)
    if is_too_large(status, message):
        return RequestError(Reason.BAD_REQUEST, said, status, RESIZE_FIX)
    if _IMAGE.search(message):
        return RequestError(Reason.BAD_REQUEST, said, status, IMAGE_FIX)
    return RequestError(Reason.BAD_REQUEST, said, status)
