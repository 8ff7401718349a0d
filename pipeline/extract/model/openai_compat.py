"""Extraction backend over any OpenAI-compatible chat-completions endpoint (TaoToken by default, or vLLM).

One request per page: a text instruction plus the prepared page as a `data:image/jpeg;base64,` URL. Why the
machinery around it: a hosted API throttles, times out and goes down, and a batch of 100k pages must neither
hammer it nor loop. So: a semaphore bounds requests in flight, each request has a timeout and a bounded
number of attempts (backoff with jitter, `Retry-After` honoured), errors that would repeat for every page
(bad key, wrong path, unknown model) stop all sending at once, and a circuit breaker turns an outage into
retryable failures instead of thousands of doomed calls. Every page ends as an `Extraction` or a `Failure`.

Each answer is judged on its own evidence (`answer_evidence`: its machine-readable zone's check digits, its
printed copies, its token probabilities, which are asked for with `logprobs` and dropped for the rest of the
run when the endpoint refuses them; and, unless `IDFLOW_OPENAI_CROSSCHECK=false`, the embedded OCR's reading of
the fields nothing else proves, `ocr_crosscheck`); after validation it is scored by the calibration table of this
backend + model + prompt (`pipeline.trust.table.Trust`; unknown confidence without one), never below the embedded
table's confidence for the embedded path's evidence of the same value (`Extraction.embedded`). A page that waits for the
embedded reading comes back `Unfinished` from `extract_deferring` as soon as its answer is in (its request slot
is free again); `extract` finishes it itself.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import random
import time
from dataclasses import dataclass
from functools import lru_cache
from types import SimpleNamespace
from typing import Any, Sequence

import cv2
import openai

from pipeline.datamodel import Extraction, Failure, PreparedImage, Reason
from pipeline.extract.base import Unfinished, finished
from pipeline.extract.model.answer_evidence import EVIDENCE_SCHEMA, Judged, judge, split_answer, unproven, value_scores
from pipeline.extract.model.answer_parsing import AnswerError, parse_answer
from pipeline.extract.model.http_errors import RequestError, classify, not_a_completion, public_url, redact, timed_out
from pipeline.extract.model.ocr_crosscheck import OcrCrossCheck
from pipeline.extract.model.prompts import PROMPT_VERSION, load_prompt, repair_prompt
from pipeline.extract.registry import OPENAI, OPENAI_URL_SETTING, find_spec
from pipeline.prepare.resize import encode
from pipeline.settings import SCHEMA_PATH, OpenAISettings, Settings
from pipeline.trust.key import TableKey
from pipeline.validate import field_errors, number_refutation, schema_errors, semantic_problems

log = logging.getLogger(__name__)

RAW_LIMIT = 2000  # characters of a bad answer kept in the failure queue
JPEG_QUALITY = 90


def encode_jpeg(pixels: Any, quality: int = JPEG_QUALITY) -> bytes:
    """JPEG bytes of an RGB uint8 array; the data URL below always declares image/jpeg to match.

    OpenCV's encoder, not Pillow's: the same libjpeg bytes, but it releases the GIL, so the encoding thread does
    not stall the event loop that keeps the requests going (Pillow's held it for ~5 ms a page)."""
    return encode(pixels, "jpeg", quality)[0]


def packed(page: PreparedImage) -> PreparedImage:
    """`page` with its JPEG made (`PreparedImage.sent_jpeg`) and its pixels dropped (a tenth of the memory while
    it waits: what reads it again, the embedded second reading, reads that JPEG, the page the model saw); as it
    was when it cannot be encoded (the request stage then reports why)."""
    if page.sent_jpeg is not None:
        return page
    try:
        jpeg = encode_jpeg(page.pixels)
    except (ValueError, cv2.error):
        return page
    return dataclasses.replace(page, sent_jpeg=jpeg, pixels=None)


def jpeg_data_url(jpeg: bytes) -> str:
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode("ascii")


def user_message(text: str, image_url: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": image_url}}]}


@lru_cache(maxsize=1)
def response_format() -> dict[str, Any]:
    """`response_format` built from the project schema plus the answer's evidence keys (`mrz`, `printed`; meta
    keys dropped: some providers reject them)."""
    schema = {k: v for k, v in json.loads(SCHEMA_PATH.read_text(encoding="utf-8")).items()
              if k not in ("$schema", "$id")}
    schema = {**schema, "required": [*schema["required"], *EVIDENCE_SCHEMA],
              "properties": {**schema["properties"], **EVIDENCE_SCHEMA}}
    return {"type": "json_schema", "json_schema": {"name": "id_document", "strict": True, "schema": schema}}


def prompt_key(lang: str) -> str:
    """The prompt a table is keyed by: the template's version and language, e.g. `extract_v3.en`."""
    return f"{PROMPT_VERSION}.{lang}"


def answer_tokens(response: Any) -> list[tuple[str, float]] | None:
    """The first choice's (token, log-probability) pairs, or None when the endpoint sent none."""
    try:
        content = response.choices[0].logprobs.content
    except (AttributeError, IndexError, TypeError):
        return None
    if not isinstance(content, list) or not content:
        return None
    pairs = []
    for item in content:
        token, logprob = getattr(item, "token", None), getattr(item, "logprob", None)
        if not isinstance(token, str) or not isinstance(logprob, (int, float)) or isinstance(logprob, bool):
            return None
        pairs.append((token, float(logprob)))
    return pairs


def refuses_logprobs(error: RequestError) -> bool:
    """A 400 whose message names the parameter: the provider does not offer log-probabilities."""
    return error.status == 400 and "logprob" in error.detail.lower()


def make_client(settings: OpenAISettings) -> openai.AsyncOpenAI:
    """The SDK client with its own retries off (retries, backoff and the breaker live here, bounded), and redirects
    not followed: the SDK follows them, re-sending the page (personal data) to a host nobody configured."""
    if settings.api_key is None:
        raise ValueError("TAOTOKEN_API_KEY is not set (environment or .env); for a keyless local server "
                         "set any value, e.g. EMPTY")
    return openai.AsyncOpenAI(
        api_key=settings.api_key.get_secret_value(),
        base_url=settings.base_url,
        max_retries=0,
        timeout=openai.Timeout(settings.timeout_s, connect=min(10.0, settings.timeout_s)),
        http_client=openai.DefaultAsyncHttpxClient(follow_redirects=False),
    )


def completion_body(body: bytes) -> Any:
    """A 200 answer's JSON body with its objects as attributes, as `answer_text`, `usage_tokens` and
    `answer_tokens` read them; a body that is not JSON as its text (which `answer_text` refuses).

    Why not the SDK's parsed `ChatCompletion`: building its models (one per log-probability token) cost ~0.7 ms
    of the request path's 3.3 ms CPU an answer, on the event loop every request shares; the SDK still makes
    the request, authenticates and classifies HTTP errors."""
    try:
        return json.loads(body, object_hook=lambda obj: SimpleNamespace(**obj))
    except ValueError:  # not JSON, or not UTF-8
        return body.decode("utf-8", "replace")


def usage_tokens(response: Any) -> tuple[int, int]:
    """(prompt, completion) tokens the endpoint reports; 0 for what it leaves out or sends as something else."""
    usage = getattr(response, "usage", None)

    def count(name: str) -> int:
        value = getattr(usage, name, None)
        return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0

    return count("prompt_tokens"), count("completion_tokens")


def answer_text(response: Any, endpoint: str) -> str | RequestError:
    """The first choice's text ("" when there is no choice or no content: the model said nothing), or the
    retryable server error of a body that is not a chat completion (the SDK hands a non-JSON body back as text;
    content a number or an object; a choice without a message)."""
    if not hasattr(response, "choices"):
        return not_a_completion(endpoint, "a body that is not JSON")
    if not response.choices:
        return ""
    message = getattr(response.choices[0], "message", None)
    content = getattr(message, "content", None)
    if message is None or not isinstance(content, (str, type(None))):
        return not_a_completion(endpoint, "a choice without text content")
    return content or ""


class CircuitBreaker:
    """Opens after `threshold` consecutive endpoint failures; after `cooldown` lets one probe through.

    Why: when the endpoint is down, every further request only adds load and latency; pages routed to the
    failure queue as `endpoint_unavailable` (retryable) are picked up by a later run.
    """

    def __init__(self, threshold: int, cooldown_s: float) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.consecutive = 0
        self._opened_at: float | None = None
        self._probing = False

    def allow(self) -> bool:
        if self._opened_at is None:
            return True
        if self._probing or time.monotonic() - self._opened_at < self.cooldown_s:
            return False
        self._probing = True
        return True

    def record_success(self) -> None:
        if self._opened_at is not None:
            log.info("endpoint answered again; circuit closed")
        self.consecutive, self._opened_at, self._probing = 0, None, False

    def record_failure(self) -> None:
        self.consecutive += 1
        if self._probing or (self._opened_at is None and self.consecutive >= self.threshold):
            if self._opened_at is None:
                log.warning("circuit opened after %d consecutive endpoint failures", self.consecutive)
            self._opened_at, self._probing = time.monotonic(), False


@dataclass(slots=True)
class _Ledger:
    """What one page cost, summed over its attempts (repair included)."""

    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class _Answer:
    """An answer's text and its tokens' log-probabilities (None when the endpoint gave none)."""

    text: str
    tokens: list[tuple[str, float]] | None = None


@dataclass(frozen=True, slots=True)
class _Verdict:
    """A parsed and validated answer: `errors` empty means usable; `judged`, what its evidence says."""

    fields: dict[str, Any]
    errors: list[str]
    reason: Reason | None
    judged: Judged | None = None


class OpenAICompatBackend:
    """`ExtractionBackend` over an OpenAI-compatible endpoint; see the module docstring for the policy."""

    def __init__(self, settings: OpenAISettings, *, concurrency: int, name: str = OPENAI.name,
                 client: openai.AsyncOpenAI | None = None) -> None:
        """`name`: the backend kind the results are labelled with (a vLLM pool's endpoints say `vllm`); its spec's
        `url_setting` is the setting a wrong-URL failure's fix quotes (the API's for a name no kind has). Answers
        carry the key of this backend + model + prompt's table (`table_key`), which scores them after
        validation."""
        if not settings.model:
            raise ValueError("TAOTOKEN_MODEL is not set: use the model id shown by the provider")
        self.name = name
        spec = find_spec(name)
        self.url_setting = spec.url_setting if spec is not None and spec.url_setting else OPENAI_URL_SETTING
        self.settings = settings
        self.model = settings.model
        self.endpoint = public_url(settings.base_url)
        self.concurrency = concurrency
        self._client = client or make_client(settings)
        self._secret = settings.api_key.get_secret_value() if settings.api_key else ""
        self._slots = asyncio.Semaphore(concurrency)
        self._breaker = CircuitBreaker(settings.breaker_threshold, settings.breaker_cooldown_s)
        self._json_schema = settings.use_json_schema  # switched off for good once the endpoint refuses it
        self._logprobs = settings.logprobs  # likewise
        self._fatal: RequestError | None = None
        self._prompt = load_prompt(settings.prompt_lang)
        self._crosscheck = OcrCrossCheck() if settings.crosscheck else None
        self._rng = random.Random()
        self.table_key = TableKey(name, self.model, prompt_key(settings.prompt_lang))

    @classmethod
    def from_run_settings(cls, settings: Settings) -> OpenAICompatBackend:
        return cls(settings.openai, concurrency=settings.concurrency)

    @property
    def logprobs_enabled(self) -> bool:
        """False once the endpoint refused `logprobs` (fields are then scored on their checks only)."""
        return self._logprobs

    @property
    def json_schema_enabled(self) -> bool:
        """False once the endpoint refused `response_format` (answers then rely on the instruction only)."""
        return self._json_schema

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        """One result per page, in input order (second readings included)."""
        return await finished(await self.extract_deferring(batch))

    async def extract_deferring(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure | Unfinished]:
        """One result per page, in input order; a page whose answer waits for the embedded second reading is
        `Unfinished` (module docstring).

        Workers pull pages, so memory holds at most 2 x `concurrency` encoded pages whatever the batch size;
        twice as many workers as request slots, so the next pages are encoded while requests are in flight
        (the semaphore alone bounds what is sent).
        """
        results: list[Extraction | Failure | Unfinished | None] = [None] * len(batch)
        pending = iter(range(len(batch)))

        async def worker() -> None:
            for i in pending:
                results[i] = await self._extract_guarded(batch[i])

        await asyncio.gather(*(worker() for _ in range(min(2 * self.concurrency, len(batch)))))
        done = [r for r in results if r is not None]
        assert len(done) == len(batch), "every page must end as an Extraction or a Failure"
        return done

    async def aclose(self) -> None:
        await self._client.close()

    async def _extract_guarded(self, page: PreparedImage) -> Extraction | Failure | Unfinished:
        try:
            return await self._extract_one(page)
        except Exception as exc:  # a bug must cost one page, not the batch; retried once (`internal_error`)
            return self._internal(page, exc)

    def _internal(self, page: PreparedImage, exc: Exception) -> Failure:
        log.error("internal error extracting page %s: %s", page.ref.sha256[:12], type(exc).__name__)
        log.debug("internal error extracting page %s", page.ref.sha256[:12], exc_info=True)
        return Failure.for_ref(page.ref, "internal", Reason.INTERNAL_ERROR,
                               self._scrub(f"{type(exc).__name__}: {exc}")[:500], backend=self.name)

    def pack(self, page: PreparedImage) -> PreparedImage:
        """The page as it will be sent (`ExtractionBackend.pack`)."""
        return packed(page)

    async def _extract_one(self, page: PreparedImage) -> Extraction | Failure | Unfinished:
        ledger = _Ledger()
        try:
            jpeg = page.sent_jpeg or await asyncio.to_thread(encode_jpeg, page.pixels)
        except (ValueError, cv2.error) as exc:
            return Failure.for_ref(page.ref, "request", Reason.BAD_REQUEST, f"cannot encode the page as JPEG: "
                                   f"{exc}", attempts=0, backend=self.name)
        messages = [user_message(self._prompt, jpeg_data_url(jpeg))]
        answer = await self._complete(messages, ledger)
        if isinstance(answer, RequestError):
            return self._request_failure(page, answer, ledger)
        verdict = judge_answer(answer.text, answer.tokens)
        refuted = verdict.judged.refuted if verdict.judged else []
        if verdict.errors or refuted:
            # One repair turn: the model sees its answer and the exact problems (a value its own zone's check
            # digit refutes included). Never more (bounded cost).
            problems = verdict.errors or refuted
            log.debug("repairing page %s: %d problem(s)", page.ref.sha256[:12], len(problems))
            messages += [{"role": "assistant", "content": answer.text},
                         {"role": "user", "content": repair_prompt(problems, self.settings.prompt_lang)}]
            answer = await self._complete(messages, ledger)
            if isinstance(answer, RequestError):
                return self._request_failure(page, answer, ledger)
            verdict = judge_answer(answer.text, answer.tokens)
        if verdict.errors or verdict.judged is None:
            assert verdict.reason is not None
            stage = "parse" if verdict.reason in (Reason.NO_JSON, Reason.INVALID_JSON) else "validate"
            return Failure.for_ref(page.ref, stage, verdict.reason, "; ".join(verdict.errors)[:1000],
                                   attempts=ledger.attempts, raw_response=self._scrub(answer.text)[:RAW_LIMIT],
                                   backend=self.name, prompt_tokens=ledger.prompt_tokens,
                                   completion_tokens=ledger.completion_tokens)
        judged, fields = verdict.judged, verdict.fields
        if self._crosscheck is None or not unproven(fields, judged):
            return self._extraction(page, fields, judged, answer, ledger)
        crosscheck = self._crosscheck

        async def second_reading() -> Extraction | Failure:
            try:
                return self._extraction(page, fields, await crosscheck.judge(page, fields, judged), answer, ledger)
            except Exception as exc:  # a bug must cost one page, not the batch
                return self._internal(page, exc)

        return Unfinished(page.ref, second_reading)

    def _extraction(self, page: PreparedImage, fields: dict[str, Any], judged: Judged, answer: _Answer,
                    ledger: _Ledger) -> Extraction:
        return Extraction(
            ref=page.ref, fields=fields, backend=self.name, model=self.model,
            field_states=judged.states, checks=judged.checks, check_failures=judged.failures,
            evidence=judged.classes, raw_response=self._scrub(answer.text), endpoint=self.endpoint,
            prompt_tokens=ledger.prompt_tokens, completion_tokens=ledger.completion_tokens,
            latency_ms=round(ledger.latency_ms, 1), attempts=ledger.attempts, issuer=judged.issuer,
            embedded=judged.embedded, table_key=self.table_key)

    def _request_failure(self, page: PreparedImage, error: RequestError, ledger: _Ledger) -> Failure:
        return Failure.for_ref(page.ref, "request", error.reason, error.diagnosis, attempts=ledger.attempts,
                               backend=self.name, prompt_tokens=ledger.prompt_tokens,
                               completion_tokens=ledger.completion_tokens)

    async def _complete(self, messages: list[dict[str, Any]], ledger: _Ledger) -> _Answer | RequestError:
        """The answer, after at most `max_attempts` failed HTTP attempts (plus, once each, the same request
        without `logprobs` and without `response_format`); or the error that ended them."""
        error: RequestError | None = None
        allow_schema = True
        failures = 0
        while True:
            async with self._slots:  # the latch, breaker and schema flag are read when the slot is ours
                use_schema = self._json_schema and allow_schema
                use_logprobs = self._logprobs
                if self._fatal is not None:
                    return self._fatal
                if not self._breaker.allow():
                    return RequestError(Reason.ENDPOINT_UNAVAILABLE, f"not sent: circuit open after "
                                        f"{self._breaker.consecutive} consecutive failures of {self.endpoint}"
                                        + (f" (last: {error.diagnosis})" if error else ""), retryable=True)
                reply = await self._send(messages, use_schema, use_logprobs, ledger)
            if isinstance(reply, _Answer):
                self._breaker.record_success()
                if not allow_schema:
                    self._disable_json_schema()
                return reply
            error = reply
            self._record(error)
            if use_logprobs and refuses_logprobs(error):
                self._disable_logprobs()  # the same request without the parameter, not counted as a failure
                continue
            if error.status == 400 and use_schema:
                allow_schema = False  # maybe the endpoint refuses response_format: try once without it
                continue
            failures += 1
            if error.fatal:
                if self._fatal is None:
                    log.error("stopping all requests: %s", error.diagnosis)
                    self._fatal = RequestError(error.reason, f"not sent: {error.detail}", error.status, error.fix,
                                               fatal=True)
                return error
            if not error.retryable or failures >= self.settings.max_attempts:
                return error
            if error.retry_after is not None and error.retry_after > self.settings.max_retry_after_s:
                return RequestError(error.reason, f"{error.detail} (server asked to wait "
                                    f"{error.retry_after:.0f} s; over the {self.settings.max_retry_after_s:.0f} s "
                                    "limit)", error.status, error.fix, retryable=True)
            await asyncio.sleep(self._backoff(failures, error.retry_after))

    async def _send(self, messages: list[dict[str, Any]], use_schema: bool, use_logprobs: bool,
                    ledger: _Ledger) -> _Answer | RequestError:
        """One HTTP attempt (the caller holds a slot); the answer or the classified error."""
        extra: dict[str, Any] = {"response_format": response_format()} if use_schema else {}
        if use_logprobs:
            extra["logprobs"] = True
        ledger.attempts += 1
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.settings.timeout_s):  # the SDK's timeout is per read, not per answer
                raw = await self._client.chat.completions.with_raw_response.create(
                    model=self.model, messages=messages, temperature=0,  # type: ignore[arg-type]
                    max_tokens=self.settings.max_tokens, **extra)
                response = completion_body(raw.http_response.content)
        except openai.OpenAIError as exc:
            error = classify(exc, base_url=self.endpoint, model=self.model, secret=self._secret,
                             url_setting=self.url_setting)
            log.debug("attempt failed: %s", error.diagnosis)
            return error
        except TimeoutError:
            return timed_out(self.endpoint)
        except ValueError as exc:  # an HTTP 200 whose body is not JSON, or not UTF-8
            return not_a_completion(self.endpoint, type(exc).__name__)
        finally:
            ledger.latency_ms += (time.perf_counter() - started) * 1000
        prompt, completion = usage_tokens(response)
        ledger.prompt_tokens += prompt
        ledger.completion_tokens += completion
        text = answer_text(response, self.endpoint)
        return text if isinstance(text, RequestError) else _Answer(text, answer_tokens(response) if use_logprobs
                                                                   else None)

    def _record(self, error: RequestError) -> None:
        """Breaker bookkeeping: any HTTP answer but a 5xx (a 429 included) proves the endpoint is alive."""
        if error.endpoint_down:
            self._breaker.record_failure()
        else:
            self._breaker.record_success()

    def _disable_logprobs(self) -> None:
        if self._logprobs:
            self._logprobs = False
            log.warning("%s refused logprobs (HTTP 400); fields are scored without token probabilities from now",
                        self.endpoint)

    def _disable_json_schema(self) -> None:
        if self._json_schema:
            self._json_schema = False
            log.warning("%s refused response_format json_schema (HTTP 400); using the instruction only from now",
                        self.endpoint)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential backoff with equal jitter; never shorter than the server's `Retry-After`."""
        ceiling = min(self.settings.backoff_max_s, self.settings.backoff_base_s * 2 ** (attempt - 1))
        delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        if retry_after is not None:
            delay = max(delay, retry_after + self._rng.uniform(0, self.settings.backoff_base_s))
        return delay

    def _scrub(self, text: str) -> str:
        return redact(text, self._secret)


def judge_answer(text: str, tokens: list[tuple[str, float]] | None = None) -> _Verdict:
    """Parse and validate one answer and judge its evidence (the live backend's verdict, also for batch
    answers): the record fields without the evidence keys, their problems, and what the evidence says."""
    try:
        answer = parse_answer(text)
    except AnswerError as exc:
        return _Verdict({}, [f"the answer is not a JSON object ({exc.detail})"], exc.reason)
    fields, evidence = split_answer(answer)
    errors = field_errors(fields)
    refutation = number_refutation(fields)
    if not errors or errors == [refutation]:
        # a number failing its own checksum is one misread field, as a check digit's refutation: asked for in the
        # repair turn, then left to `validate` (number unreadable, the other fields stand)
        judged = judge(fields, evidence, value_scores(text, tokens) if tokens else None)
        if refutation is not None:
            judged.refuted.append(refutation)
        return _Verdict(fields, [], None, judged)
    problems = [] if schema_errors(fields) else semantic_problems(fields)
    return _Verdict(fields, errors, problems[0][0] if problems else Reason.SCHEMA_VIOLATION)
