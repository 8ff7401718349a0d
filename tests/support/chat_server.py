"""A real HTTP server on loopback that speaks the chat-completions protocol, for tests and benchmarks.

Why a real server and not a mocked SDK: retries, timeouts, dropped connections, `Retry-After` and connection
limits only behave truthfully over a socket. It checks the request shape a vision endpoint needs (Bearer key,
model id, one `data:image/<type>;base64,` part whose MIME matches the bytes, temperature 0) and injects faults
per request, in arrival order or per image.

In-process (tests):

    with ChatServer(ServerConfig(latency_s=0.05, faults=["429", "ok"])) as server:
        settings = OpenAISettings(base_url=server.base_url, api_key=server.config.api_key, model=...)

Answers computed per request (tests/support/mistake_server.py): `ServerConfig.responder` is given each chat
request (`ChatCall`: image hash, prompt text, body) and returns a `Reply` (the fields, optionally the exact content
and its token log-probabilities), or raises `HttpError` for an answer the client must see as an error.

Standalone (several processes, e.g. a fake vLLM pool); prints `READY <base_url>` once listening:

    python -m tests.support.chat_server --port 8101 --latency 0.4 --max-concurrency 32 --base-path /v1
"""

from __future__ import annotations

import argparse
import base64
import binascii
import hashlib
import io
import json
import math
import re
import signal
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from PIL import Image

FAULTS = frozenset({
    "ok",  # a valid answer
    "429",  # rate limited, with Retry-After
    "500", "503",  # server errors
    "slow",  # answer only after `slow_s` (past the client's timeout)
    "drop",  # close the connection without answering
    "fenced",  # the JSON inside a Markdown code fence
    "prose",  # the JSON with sentences around it
    "non_json",  # an answer with no JSON at all
    "invalid",  # JSON that violates the schema
    "refuse_image",  # 400: the endpoint does not accept the image
    "html",  # 200 with a web page instead of a completion (a proxy or a login portal in the way)
    "content_number",  # 200, a completion whose message.content is a number
    "trickle",  # 200, the completion sent one byte every `trickle_s`: each read is quick, the answer is not
    "redirect",  # 307 to /moved/... on this server (a client that follows it sends the page there)
})

VALID_ANSWER: dict[str, Any] = {
    "doc_type": "passport", "name": "ZHANG SAN", "id_number": "E12345678",
    "expiry_date": "2031-05-01", "orientation": "landscape",
}
_DATA_URL = re.compile(r"^data:image/([a-z0-9.+-]+);base64,(.*)$", re.DOTALL)
_MAGIC = {b"\xff\xd8\xff": "jpeg", b"\x89PNG\r\n\x1a\n": "png", b"GIF8": "gif"}


def sniff_image_type(data: bytes) -> str | None:
    """The image type the bytes really are (what a careful server checks against the declared MIME)."""
    for magic, kind in _MAGIC.items():
        if data.startswith(magic):
            return kind
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def image_sha256(data: bytes) -> str:
    """Key for `answers` and `faults_by_image`: sha256 of the decoded image bytes."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class ServerConfig:
    api_key: str = "test-key-0123456789"
    model: str = "test-vlm"
    models: list[str] | None = None  # what GET /models lists; default [model]
    base_path: str = ""  # "" serves /chat/completions (like TaoToken's /api base); "/v1" like vLLM
    latency_s: float = 0.0  # time spent "generating" each answer
    max_concurrency: int = 64  # answers generated at once; further requests queue (like GPU batch slots)
    faults: list[str] = field(default_factory=list)  # consumed one per chat request, in arrival order
    faults_by_image: dict[str, list[str]] = field(default_factory=dict)  # image sha256 -> its own sequence
    default_fault: str = "ok"  # when no sequence applies
    retry_after_s: float = 1.0
    slow_s: float = 5.0
    trickle_s: float = 0.05
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)  # image sha256 -> fields to answer
    default_answer: dict[str, Any] = field(default_factory=lambda: dict(VALID_ANSWER))
    reject_response_format: bool = False  # 400 whenever response_format is sent
    count_image_tokens: bool = True  # False: usage ignores the image (an endpoint that drops it)
    max_image_pixels: int | None = None  # 400 "image too large" above this
    hold: threading.Event | None = None  # answers wait for it: a test sees requests pile up, then releases them
    reject_logprobs: bool = False  # 400 whenever logprobs are asked for (providers that do not support them)
    responder: Callable[[ChatCall], Reply] | None = None  # computes each answer (instead of `answers`)
    routes: dict[str, Callable[[], Any]] = field(default_factory=dict)  # extra GET path -> JSON body

    def __post_init__(self) -> None:
        unknown = {f for f in [*self.faults, self.default_fault, *sum(self.faults_by_image.values(), [])]
                   if f not in FAULTS}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {sorted(FAULTS)}")


@dataclass(frozen=True)
class ChatCall:
    """What a `responder` is given: the request's image hash (None without an image), its text parts joined, the
    decoded request body."""

    image_sha256: str | None
    text: str
    body: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """A responder's answer: `fields` (what `_content` formats for the faults that reshape an answer), and for a
    plain answer optionally the exact `content` and `logprobs` (`choices[0].logprobs.content`)."""

    fields: dict[str, Any]
    content: str | None = None
    logprobs: list[dict[str, Any]] | None = None


@dataclass
class RequestRecord:
    """One chat request as the server saw it (no key, no image bytes)."""

    path: str
    status: int
    fault: str | None = None
    image_sha256: str | None = None
    response_format: bool = False
    logprobs: bool = False
    n_messages: int = 0
    text: str = ""
    started: float = 0.0
    ended: float = 0.0  # when the server began its answer (or dropped the connection): logged at that moment


class _HttpError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, *, bare: bool = False) -> None:
        super().__init__(message)
        self.status, self.message, self.code, self.bare = status, message, code, bare

    def body(self) -> dict[str, Any]:
        if self.bare:  # what FastAPI (vLLM) answers for an unknown route
            return {"detail": self.message}
        return {"error": {"message": self.message, "type": "invalid_request_error", "code": self.code}}


HttpError = _HttpError  # what a responder raises for an error answer (status, message, code)


class ChatServer:
    """Threaded chat-completions server on 127.0.0.1; `port=0` picks a free port."""

    def __init__(self, config: ServerConfig | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.config = config or ServerConfig()
        self.requests: list[RequestRecord] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.config.max_concurrency)
        self._httpd = _Server((host, port), _make_handler(self))

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.config.base_path}"

    def serve_forever(self) -> None:
        self._httpd.serve_forever(poll_interval=0.05)

    def start(self) -> ChatServer:
        """Serve from a daemon thread (in-process use)."""
        threading.Thread(target=self.serve_forever, name=f"chat-server-{self.port}", daemon=True).start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def chat_requests(self) -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            chats = [r for r in self.requests if r.path.endswith("/chat/completions")]
            return {"chat_requests": len(chats), "peak_in_flight": self.peak_in_flight,
                    "statuses": dict(Counter(str(r.status) for r in chats)),
                    "faults": dict(Counter(r.fault for r in chats if r.fault))}

    # -- request handling (called from handler threads) --

    def next_fault(self, image_sha: str | None) -> str:
        with self._lock:
            per_image = self.config.faults_by_image.get(image_sha or "")
            if per_image:
                return per_image.pop(0)
            if self.config.faults:
                return self.config.faults.pop(0)
            return self.config.default_fault

    def record(self, rec: RequestRecord) -> None:
        with self._lock:
            self.requests.append(rec)

    def enter(self) -> None:
        self._slots.acquire()
        with self._lock:
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def leave(self) -> None:
        with self._lock:
            self.in_flight -= 1
        self._slots.release()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # a "slow" handler must not hold up stop()
    request_queue_size = 256

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # dropped and timed-out connections are part of the script, not news


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _make_handler(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    cfg = server.config

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDK expects
        disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests capture logs
            pass

        _rec: RequestRecord | None = None  # the chat request being answered, logged once (`_log`)

        def _log(self) -> None:
            """Log the request before its answer goes out, so a client that has read the answer finds the
            request in the log."""
            rec, self._rec = self._rec, None
            if rec is not None:
                rec.ended = time.monotonic()
                server.record(rec)

        def do_GET(self) -> None:
            self._rec = None
            try:
                if self.path == "/health":
                    return self._send(200, {"status": "ok"})
                if self.path == "/stats":
                    return self._send(200, server.stats())
                if self.path in cfg.routes:
                    return self._send(200, cfg.routes[self.path]())
                self._check_key()
                if self.path != f"{cfg.base_path}/models":
                    raise _HttpError(404, "Not Found", bare=True)
                ids = cfg.models or [cfg.model]
                self._send(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "test"}
                                                            for m in ids]})
            except _HttpError as err:
                self._send(err.status, err.body())

        def do_POST(self) -> None:
            rec = self._rec = RequestRecord(path=self.path, status=0, started=time.monotonic())
            try:
                payload = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != f"{cfg.base_path}/chat/completions":
                    raise _HttpError(404, "Not Found", bare=True)
                self._check_key()
                self._chat(json.loads(payload), rec)
            except _HttpError as err:
                rec.status = err.status
                headers = {"Retry-After": f"{cfg.retry_after_s:g}"} if err.status == 429 else {}
                self._send(err.status, err.body(), headers)
            except json.JSONDecodeError:
                rec.status = 400
                self._send(400, _HttpError(400, "request body is not JSON").body())
            finally:
                self._log()  # a request that ended without an answer

        def _check_key(self) -> None:
            offered = self.headers.get("Authorization", "")
            if offered != f"Bearer {cfg.api_key}":
                # Echo the offered key, as careless servers do: the client must keep it out of its outputs.
                raise _HttpError(401, f"Incorrect API key provided: {offered.removeprefix('Bearer ')}",
                                 "invalid_api_key")

        def _chat(self, body: dict[str, Any], rec: RequestRecord) -> None:
            if body.get("model") != cfg.model:
                raise _HttpError(404, f"The model `{body.get('model')}` does not exist.", "model_not_found")
            if body.get("temperature") != 0:
                raise _HttpError(400, "temperature must be 0 for extraction requests")
            texts, images = _split_content(body.get("messages"))
            rec.n_messages, rec.text = len(body["messages"]), "\n".join(texts)
            rec.response_format = "response_format" in body
            rec.logprobs = bool(body.get("logprobs"))
            image_tokens = 0
            if images:
                data, (width, height) = _decode_image(images[0])
                rec.image_sha256 = image_sha256(data)
                if cfg.max_image_pixels and width * height > cfg.max_image_pixels:
                    raise _HttpError(400, f"Image too large: {width}x{height} = {width * height} pixels exceeds "
                                          f"the maximum of {cfg.max_image_pixels}")
                image_tokens = math.ceil(width / 32) * math.ceil(height / 32) + 2 if cfg.count_image_tokens else 0
            if rec.response_format and cfg.reject_response_format:
                raise _HttpError(400, "response_format type json_schema is not supported by this server")
            if rec.logprobs and cfg.reject_logprobs:
                raise _HttpError(400, "logprobs is not supported by this model", "unsupported_parameter")
            rec.fault = fault = server.next_fault(rec.image_sha256)
            if fault in ("429", "500", "503", "refuse_image"):
                raise {"429": _HttpError(429, "Rate limit reached, slow down", "rate_limit_exceeded"),
                       "500": _HttpError(500, "internal server error"),
                       "503": _HttpError(503, "service unavailable"),
                       "refuse_image": _HttpError(400, "Invalid image input: this model does not accept "
                                                       "image_url content")}[fault]
            if fault == "redirect":
                rec.status = 307
                location = f"http://127.0.0.1:{self.server.server_address[1]}/moved{self.path}"
                self._send_bytes(307, b"", "text/plain", {"Location": location})
                return
            server.enter()
            try:
                time.sleep(cfg.slow_s if fault == "slow" else cfg.latency_s)
                if cfg.hold is not None:
                    cfg.hold.wait(timeout=120)
            finally:
                server.leave()
            if fault == "drop":
                rec.status = 0
                self.close_connection = True
                self._log()
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if fault == "html":
                rec.status = 200
                self._send_bytes(200, b"<html><body>Please sign in</body></html>", "text/html")
                return
            reply = cfg.responder(ChatCall(rec.image_sha256, rec.text, body)) if cfg.responder and images else None
            fields = reply.fields if reply else cfg.answers.get(rec.image_sha256 or "", cfg.default_answer)
            content: Any = _content(fault, fields) if images else "OK"
            plain = reply is not None and fault == "ok"
            if plain and reply.content is not None:
                content = reply.content
            if fault == "content_number":
                content = 42
            choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}
            if plain and reply.logprobs is not None:
                choice["logprobs"] = {"content": reply.logprobs}
            rec.status = 200
            self._send(200, {
                "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": int(time.time()),
                "model": cfg.model,
                "choices": [choice],
                "usage": {"prompt_tokens": _tokens(rec.text) + image_tokens + 8,
                          "completion_tokens": _tokens(str(content)),
                          "total_tokens": _tokens(rec.text) + image_tokens + 8 + _tokens(str(content))},
            }, trickle_s=cfg.trickle_s if fault == "trickle" else 0.0)

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None, *,
                  trickle_s: float = 0.0) -> None:
            self._send_bytes(status, json.dumps(body, ensure_ascii=False).encode(), "application/json", headers,
                             trickle_s=trickle_s)

        def _send_bytes(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None,
                        *, trickle_s: float = 0.0) -> None:
            self._log()
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                if not trickle_s:
                    self.wfile.write(data)
                for i in range(len(data) if trickle_s else 0):
                    self.wfile.write(data[i:i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_s)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout): nothing to do
                self.close_connection = True

    return Handler


def _split_content(messages: Any) -> tuple[list[str], list[str]]:
    """Texts and image URLs of a conversation whose first message is the user's; at most one image."""
    if not isinstance(messages, list) or not messages or messages[0].get("role") != "user":
        raise _HttpError(400, "messages must start with a user message")
    texts: list[str] = []
    images: list[str] = []
    for message in messages:
        content = message.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        for part in parts:
            if part.get("type") == "text":
                texts.append(part.get("text", ""))
            elif part.get("type") == "image_url":
                images.append((part.get("image_url") or {}).get("url", ""))
            else:
                raise _HttpError(400, f"unsupported content part type {part.get('type')!r}")
    if len(images) > 1:
        raise _HttpError(400, f"At most 1 image(s) may be provided in one request, got {len(images)}")
    return texts, images


def _decode_image(url: str) -> tuple[bytes, tuple[int, int]]:
    match = _DATA_URL.match(url)
    if not match:
        raise _HttpError(400, "Invalid image URL: expected data:image/<type>;base64,<data>")
    declared = {"jpg": "jpeg"}.get(match.group(1), match.group(1))
    try:
        data = base64.b64decode(match.group(2), validate=True)
    except binascii.Error:
        raise _HttpError(400, "Invalid image: base64 data does not decode") from None
    actual = sniff_image_type(data)
    if actual != declared:
        raise _HttpError(400, f"Invalid image: MIME image/{declared} does not match the bytes ({actual or 'unknown'})")
    with Image.open(io.BytesIO(data)) as image:
        return data, image.size


def _content(fault: str, fields: dict[str, Any]) -> str:
    answer = json.dumps(fields, ensure_ascii=False)
    if fault == "fenced":
        return f"```json\n{answer}\n```"
    if fault == "prose":
        return f"Here is the extracted record:\n{answer}\nLet me know if you need anything else."
    if fault == "non_json":
        return "Sorry, I cannot read this document."
    if fault == "invalid":
        return json.dumps({**fields, "id_number": "no. 12 34", "expiry_date": "01/05/2031"})
    return answer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default=ServerConfig.api_key)
    parser.add_argument("--model", default=ServerConfig.model)
    parser.add_argument("--base-path", default="", help='"" (TaoToken-like) or "/v1" (vLLM-like)')
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--max-concurrency", type=int, default=64)
    parser.add_argument("--fault", action="append", default=[], choices=sorted(FAULTS),
                        help="fault for the next request, repeatable (a sequence)")
    parser.add_argument("--default-fault", default="ok", choices=sorted(FAULTS))
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--slow", type=float, default=5.0)
    parser.add_argument("--answer", type=json.loads, default=None, help="JSON fields to answer")
    parser.add_argument("--reject-response-format", action="store_true")
    parser.add_argument("--max-image-pixels", type=int, default=None)
    args = parser.parse_args(argv)
    config = ServerConfig(
        api_key=args.api_key, model=args.model, base_path=args.base_path, latency_s=args.latency,
        max_concurrency=args.max_concurrency, faults=args.fault, default_fault=args.default_fault,
        retry_after_s=args.retry_after, slow_s=args.slow, reject_response_format=args.reject_response_format,
        max_image_pixels=args.max_image_pixels, **({"default_answer": args.answer} if args.answer else {}))
    server = ChatServer(config, host=args.host, port=args.port)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.stop).start())
    print(f"READY {server.base_url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
