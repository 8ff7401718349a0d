"""`idflow doctor`: the three-step check of an OpenAI-compatible endpoint, with a one-line fix per problem.

Why: the usual integration mistakes (a doubled or missing `/v1`, a stale or padded key, a local
`--served-model-name` used as the model id, an image that never reaches the model, a page too large, an old
vLLM still holding the port) all look like "it doesn't work" from a batch run. Each step proves one thing:

1. text ping: key, base URL and model id are right;
2. small image: the image arrives (prompt tokens grow by about its visual tokens);
3. sample document: a real page comes back as JSON that passes the schema (through the production backend).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import openai
from dotenv import dotenv_values
from PIL import Image, ImageDraw

from pipeline.datamodel import DocumentRef, Extraction, PreparedImage, Reason
from pipeline.extract.model.http_errors import (
    IMAGE_FIX,
    RequestError,
    classify,
    host_port,
    is_local,
    is_model_missing,
    not_a_completion,
    path_fix,
    public_url,
    server_message,
    timed_out,
)
from pipeline.extract.model.openai_compat import (
    OpenAICompatBackend,
    answer_text,
    encode_jpeg,
    jpeg_data_url,
    make_client,
    usage_tokens,
    user_message,
)
from pipeline.settings import OpenAISettings, PrepareSettings, VllmSettings

PROBE_TEXT = "Reply with the single word OK."
PROBE_SIZE = (320, 192)  # small, multiples of 32: 60 visual tokens on Qwen3.5
MIN_IMAGE_TOKENS = 16  # any vision encoder charges at least this much for the probe image
KEY_VARS = ("TAOTOKEN_API_KEY", "IDFLOW_OPENAI_API_KEY")  # the aliases of OpenAISettings.api_key, in order


@dataclass(frozen=True, slots=True)
class SettingNames:
    """The settings a fix tells the user to change: the API's (default) or the vLLM pool's."""

    key_vars: tuple[str, ...] = KEY_VARS
    base_url: str = "TAOTOKEN_BASE_URL"
    model: str = "TAOTOKEN_MODEL"


OPENAI_NAMES = SettingNames()
VLLM_NAMES = SettingNames(("IDFLOW_VLLM_API_KEY",), "the IDFLOW_VLLM_ENDPOINTS entry", "IDFLOW_VLLM_MODEL")


@dataclass(frozen=True, slots=True)
class Step:
    name: str
    ok: bool
    detail: str
    fix: str | None = None


@dataclass(slots=True)
class DoctorReport:
    endpoint: str
    model: str | None
    steps: list[Step]

    @property
    def ok(self) -> bool:
        return len(self.steps) == 3 and all(s.ok for s in self.steps)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def lines(self) -> list[str]:
        """Plain-text rendering for the CLI: one line per step, plus its fix."""
        out = [f"endpoint {self.endpoint}  model {self.model or '(unset)'}"]
        for step in self.steps:
            out.append(f"[{'ok' if step.ok else 'FAIL'}] {step.name}: {step.detail}")
            if step.fix:
                out.append(f"       fix: {step.fix}")
        return out


@dataclass(frozen=True, slots=True)
class KeySource:
    """Where the key the settings hold came from, without the key itself."""

    where: str | None  # "environment", ".env" or None (unset)
    var: str | None
    padded: bool  # the raw value had surrounding whitespace
    shadows_dotenv: bool  # the environment overrides a different value in .env


def key_source(environ: Mapping[str, str], env_file: Path, key_vars: tuple[str, ...] = KEY_VARS) -> KeySource:
    """Same precedence as pydantic-settings: environment first, then `.env`; first alias wins."""
    dotenv = {k: v for k, v in dotenv_values(env_file).items() if v is not None} if env_file.is_file() else {}
    for where, values in (("environment", environ), (".env", dotenv)):
        for var in key_vars:
            raw = values.get(var)
            if raw is not None:
                other = dotenv.get(var)
                return KeySource(where, var, raw != raw.strip(),
                                 where == "environment" and other is not None and other.strip() != raw.strip())
    return KeySource(None, None, False, False)


def _key_fix(source: KeySource, names: SettingNames = OPENAI_NAMES) -> str:
    if source.where is None:
        return f"create a key in the provider console and add {names.key_vars[0]}=<key> to .env"
    if source.shadows_dotenv:
        return (f"{source.var} in the environment overrides a different value in .env: unset it (or restart the "
                "shell/kernel that exported it) so .env applies")
    padded = " (its value has surrounding whitespace: other tools will send it as is)" if source.padded else ""
    return f"the key in the {source.where} ({source.var}) is stale or revoked{padded}: paste a fresh key there"


class _Doctor:
    def __init__(self, settings: OpenAISettings, prepare: PrepareSettings, source: KeySource,
                 names: SettingNames) -> None:
        self.settings = settings
        self.names = names
        self.prepare = prepare
        self.source = source
        self.endpoint = public_url(settings.base_url)
        self.client = make_client(settings)

    async def text_ping(self) -> tuple[Step, int]:
        started = time.perf_counter()
        reply = await self._ask("text ping", [{"role": "user", "content": PROBE_TEXT}])
        if isinstance(reply, Step):
            return reply, 0
        tokens = usage_tokens(reply)[0]
        return Step("text ping", True, f"{self.settings.model} answered in "
                    f"{(time.perf_counter() - started) * 1000:.0f} ms (prompt tokens {tokens})"), tokens

    async def image_arrives(self, text_tokens: int) -> Step:
        expected = PROBE_SIZE[0] * PROBE_SIZE[1] // (self.prepare.patch ** 2)
        message: Any = user_message(PROBE_TEXT, jpeg_data_url(encode_jpeg(_probe_pixels())))
        reply = await self._ask("image arrives", [message], sent_image=True)
        if isinstance(reply, Step):
            return reply
        prompt = usage_tokens(reply)[0]
        if not prompt:
            return Step("image arrives", False, "the endpoint reports no token usage, so it cannot be shown that "
                        "the image arrived", "use an endpoint that returns usage (vLLM and TaoToken do)")
        grew = prompt - text_tokens
        detail = (f"prompt tokens {text_tokens} -> {prompt} with a {PROBE_SIZE[0]}x"
                  f"{PROBE_SIZE[1]} image (+{grew}; ~{expected} expected at {self.prepare.patch} px per token)")
        if grew < MIN_IMAGE_TOKENS:
            return Step("image arrives", False, f"the image did not reach the model: {detail}",
                        "use a vision-language model id and send the image as an image_url part "
                        "(data:image/jpeg;base64,...), not inside the text")
        return Step("image arrives", True, detail)

    async def _ask(self, name: str, messages: list[dict[str, Any]], *, sent_image: bool = False) -> Any:
        """The endpoint's completion of a probe, or the failed `Step`: the same whole-request deadline and the
        same checks of the answer's shape as a run makes."""
        try:
            async with asyncio.timeout(self.settings.timeout_s):
                response = await self.client.chat.completions.create(
                    model=self.settings.model or "", messages=messages, temperature=0, max_tokens=16)
        except openai.OpenAIError as exc:
            return await self._failed(name, exc, sent_image=sent_image)
        except TimeoutError:
            return Step(name, False, timed_out(self.endpoint).detail,
                        self._timeout_fix() if is_local(self.endpoint) else None)
        except ValueError as exc:  # an HTTP 200 whose body is not JSON, or not UTF-8
            error = not_a_completion(self.endpoint, type(exc).__name__)
        else:
            answer = answer_text(response, self.endpoint)
            if not isinstance(answer, RequestError):
                return response
            error = answer
        return Step(name, False, error.detail, error.fix or None)

    async def sample_document(self, sample: PreparedImage) -> Step:
        backend = OpenAICompatBackend(self.settings, concurrency=1, name="doctor", client=self.client)
        [outcome] = await backend.extract([sample])
        if isinstance(outcome, Extraction):
            shown = ", ".join(k for k, v in outcome.fields.items() if v is not None)
            mode = "" if backend.json_schema_enabled else "; endpoint refused response_format, instruction-only"
            return Step("sample document", True, f"schema-valid JSON in {outcome.latency_ms:.0f} ms "
                        f"(prompt {outcome.prompt_tokens} / completion {outcome.completion_tokens} tokens, "
                        f"{outcome.attempts} attempt(s); non-null: {shown}{mode})")
        detail, _, fix = outcome.detail.partition(" -- ")
        if outcome.reason == Reason.BAD_REQUEST and "too large" in outcome.detail.lower():
            fix = (f"image too large: lower IDFLOW_MAX_PIXELS (now {self.prepare.max_pixels}, e.g. "
                   f"{self.prepare.max_pixels // 2}) or IDFLOW_MAX_LONG_EDGE (now {self.prepare.max_long_edge})")
        elif outcome.stage in ("parse", "validate"):
            fix = ("the model answered but not with schema-valid JSON, even after one repair request: check that "
                   "the model is a vision-language model; try IDFLOW_OPENAI_PROMPT_LANG=zh")
        return Step("sample document", False, f"{outcome.stage}/{outcome.reason}: {detail}", fix or None)

    async def _failed(self, name: str, exc: openai.OpenAIError, *, sent_image: bool = False) -> Step:
        """The failed step, with a better fix than the backend's when probing can tell: key source, offered
        models, a working base URL."""
        secret = self.settings.api_key.get_secret_value() if self.settings.api_key else ""
        error = classify(exc, base_url=self.endpoint, model=self.settings.model or "", secret=secret)
        return Step(name, False, error.detail, await self._fix(exc, error.fix, sent_image))

    async def _fix(self, exc: openai.OpenAIError, fix: str, sent_image: bool) -> str:
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        if status in (401, 403):
            return _key_fix(self.source, self.names)
        if isinstance(exc, openai.APIStatusError) and is_model_missing(exc.status_code, server_message(exc)):
            return await self._model_fix()
        if status == 404:
            working = await self._working_base_url()
            return f"set {self.names.base_url}={working}" if working else path_fix(self.endpoint)
        if isinstance(exc, openai.APITimeoutError) and is_local(self.endpoint):
            return self._timeout_fix()
        if status == 400 and sent_image and not fix:
            return IMAGE_FIX
        return fix or "see the server's message above"

    def _timeout_fix(self) -> str:
        """A local endpoint that accepts connections and never answers."""
        return (f"something accepts connections on {host_port(self.endpoint)} but does not answer: a stuck "
                f"vLLM may hold the port (check `ss -lntp 'sport = :{urlsplit(self.endpoint).port}'`)")

    async def _model_fix(self) -> str:
        offered = await self._models(self.client)
        if offered is None:
            return f"set {self.names.model} to the model id shown in the provider console"
        fix = f"set {self.names.model} to one of: {', '.join(offered) or '(none offered)'}"
        if is_local(self.endpoint):
            port = urlsplit(self.endpoint).port
            fix += (f"; if you expected another model, an old server may still hold port {port} "
                    f"(check `ss -lntp 'sport = :{port}'` and stop it)")
        return fix

    async def _working_base_url(self) -> str | None:
        """The first alternative base URL (with /v1 removed or added) whose /models route exists."""
        for candidate in _base_url_candidates(self.endpoint):
            if await self._models(self.client.with_options(base_url=candidate)) is not None:
                return candidate
        return None

    @staticmethod
    async def _models(client: openai.AsyncOpenAI) -> list[str] | None:
        try:
            return sorted(m.id for m in (await client.models.list()).data)
        except openai.OpenAIError:
            return None


def _base_url_candidates(base_url: str) -> list[str]:
    parts = urlsplit(base_url)
    path = parts.path.rstrip("/").removesuffix("/chat/completions")
    options = [path, path.removesuffix("/v1")] if path.endswith("/v1") else [path, path + "/v1"]
    return [urlunsplit(parts._replace(path=p)) for p in dict.fromkeys(options) if p != parts.path.rstrip("/")]


def _probe_pixels() -> np.ndarray:
    """A small image with structure (bars), so an encoder cannot collapse it to nothing."""
    image = Image.new("RGB", PROBE_SIZE, "white")
    draw = ImageDraw.Draw(image)
    for x in range(0, PROBE_SIZE[0], 40):
        draw.rectangle((x, 20, x + 20, PROBE_SIZE[1] - 20), fill=(x % 256, 64, 160))
    return np.asarray(image)


def synthetic_sample() -> PreparedImage:
    """A fake passport data page (Latin text only), used when no sample document is given."""
    size = (640, 416)
    image = Image.new("RGB", size, (236, 232, 220))
    draw = ImageDraw.Draw(image)
    lines = ["PASSPORT", "Surname: ZHANG", "Given names: SAN", "Passport No.: E12345678",
             "Date of expiry: 2031-05-01"]
    for i, line in enumerate(lines):
        draw.text((40, 40 + 56 * i), line, fill="black", font_size=28)
    ref = DocumentRef(Path("doctor-sample.png"), "doctor-sample.png", "0" * 64)
    return PreparedImage(ref=ref, pixels=np.asarray(image), original_size=size, sent_size=size, rotation_applied=0,
                         skew_corrected=0.0, orientation="landscape", visual_tokens=size[0] * size[1] // 1024)


async def run_doctor(settings: OpenAISettings, *, sample: PreparedImage | None = None,
                     prepare: PrepareSettings | None = None, env_file: Path | str = ".env",
                     environ: Mapping[str, str] | None = None, names: SettingNames = OPENAI_NAMES) -> DoctorReport:
    """Run the three steps in order; a failed step skips the rest (they would fail for the same cause)."""
    source = key_source(os.environ if environ is None else environ, Path(env_file), names.key_vars)
    report = DoctorReport(public_url(settings.base_url), settings.model, [])
    if settings.api_key is None or not settings.model:
        missing = (f"no API key: {names.key_vars[0]} is set neither in the environment nor in .env"
                   if settings.api_key is None else f"{names.model} is not set")
        fix = _key_fix(source, names) if settings.api_key is None else f"set {names.model} to the model id in the console"
        report.steps.append(Step("text ping", False, missing, fix))
        return report
    doctor = _Doctor(settings, prepare or PrepareSettings(), source, names)
    try:
        step, text_tokens = await doctor.text_ping()
        report.steps.append(step)
        if step.ok:
            report.steps.append(step := await doctor.image_arrives(text_tokens))
        if step.ok:
            report.steps.append(await doctor.sample_document(sample or synthetic_sample()))
    finally:
        await doctor.client.close()
    return report


def doctor(settings: OpenAISettings, **kwargs: object) -> DoctorReport:
    """Synchronous entry point for the CLI: `report = doctor(settings); print(*report.lines(), sep="\\n")`."""
    return asyncio.run(run_doctor(settings, **kwargs))  # type: ignore[arg-type]


def doctor_pool(vllm: VllmSettings, **kwargs: object) -> list[DoctorReport]:
    """The three steps against every endpoint of the vLLM pool (`idflow doctor --backend vllm`), with the pool's
    key, model and timeouts, and fixes naming the IDFLOW_VLLM_* settings. Raises ValueError when the pool has
    no endpoints (the message says where they were looked for)."""
    pool = vllm.resolve_pool()
    return [doctor(OpenAISettings(base_url=endpoint, api_key=vllm.api_key, model=pool.model,
                                  max_attempts=vllm.attempts_per_endpoint), names=VLLM_NAMES, **kwargs)
            for endpoint in pool.endpoints]
