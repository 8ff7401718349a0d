"""One typed settings tree for the whole pipeline (environment, `.env`, CLI overrides), read once at the entry
point and passed down: `Settings` with its groups (prepare, openai, vllm, calibration, review, canary, schedule).

Why one tree: the idempotency fingerprint is derived from it (`pipeline.extract.registry.fingerprint`), so a
change to any setting that can change a result (backend, model, prompt, schema, preprocessing) makes previously
done documents eligible again; and every setting has one default, here. No other module reads the environment for
a setting of ours. This module imports nothing of the pipeline: everything else may import it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Literal, get_args

from pydantic import AliasChoices, Field, HttpUrl, SecretStr, TypeAdapter, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Read through importlib.resources so an installed wheel finds it wherever it runs from (`schemas/` at the
# repository root is a symlink to this folder, kept for the README's references).
SCHEMA_PATH = files("pipeline").joinpath("schemas", "id_document.schema.json")

# The backend kinds, as the backend registry (`pipeline.extract.registry`) declares them; a test keeps the two equal.
# A wrong name is refused listing them.
Backend = Literal["ocr", "openai", "vllm", "hybrid"]
VlmBackend = Literal["openai", "vllm"]
BACKEND_NAMES: tuple[str, ...] = get_args(Backend)
VLM_NAMES: tuple[str, ...] = get_args(VlmBackend)
# The documented auto-accept threshold: a record whose least confident field is below it goes to a person, and the
# hybrid backend asks its model about exactly what the OCR alone would not auto-accept.
AUTO_ACCEPT_THRESHOLD = 0.95


# Base URLs: an http(s) URL with a host, checked when the settings are read, so a mistyped one (`not a url`,
# `ftp//host/api`) is a configuration error before any document is touched, not a run whose every document fails
# as `endpoint_unavailable`.
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


# What an API key may look like once read from the environment, `.env` or a console paste. Why a check and not
# just `strip()`: a key is sent in an HTTP header, and a key with a newline, a space or an invisible character
# (U+200B from a web console) inside cannot be; the HTTP library then fails with an error that quotes the header,
# key included, and that error would travel into the failure queue and the logs as a retryable outage. Refused up
# front, as a configuration error that names the setting and never the value.
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


class PrepareSettings(BaseSettings):
    """Image budget: what every backend receives. Qwen3.5 charges one visual token per 32x32 px."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_", env_file=".env", extra="ignore")

    max_long_edge: int = Field(1600, ge=64, description="long-edge cap of the page a backend receives")
    max_pixels: int = Field(1_048_576, ge=4096, description="pixel budget of the page a backend receives")
    patch: int = Field(32, ge=1, description="pixels per visual token side (32 for Qwen3.5, 28 for Qwen2.5-VL)")
    max_input_pixels: int = Field(120_000_000, ge=1, description="decompression-bomb cap on the decoded page")
    # Excluded from the fingerprint: it decides whether a file is read at all, not what its result is.
    max_input_bytes: int = Field(512 * 1024 * 1024, ge=1, exclude=True,
                                 description="larger files are too_large (a document is read into memory once)")
    min_input_side: int = Field(48, ge=1, description=(
        "pages smaller than this on either side are too_small (a strip at least 2.8 times as wide as high, a "
        "cut-out MRZ, down to half of it)"))
    pdf_dpi: int = Field(200, ge=50, le=600, description="at most this resolution when rendering a PDF page")
    jpeg_quality: int = Field(90, ge=50, le=100, description="JPEG quality of the page sent to a model")


class OpenAISettings(BaseSettings):
    """An OpenAI-compatible endpoint; by default TaoToken, whose base URL has no `/v1`."""

    # populate_by_name: without it `OpenAISettings(base_url=...)` is silently ignored (extra="ignore").
    # hide_input_in_errors: a validation error's text must never carry the key it refused.
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True,
                                      hide_input_in_errors=True)

    api_key: SecretStr | None = Field(None, validation_alias=AliasChoices("TAOTOKEN_API_KEY", "IDFLOW_OPENAI_API_KEY"),
                                      description="the endpoint's key; never logged or stored")
    base_url: str = Field("https://taotoken.net/api",
                          validation_alias=AliasChoices("TAOTOKEN_BASE_URL", "IDFLOW_OPENAI_BASE_URL"),
                          description="base URL the SDK appends /chat/completions to")
    model: str | None = Field(None, validation_alias=AliasChoices("TAOTOKEN_MODEL", "IDFLOW_OPENAI_MODEL"),
                              description="model id as the provider lists it")
    key_block: str | None = Field(None, validation_alias="IDFLOW_OPENAI_KEY_BLOCK",
                                  description="a Prefect Secret block holding the key, read inside the run when the "
                                              "environment and .env set none")
    # Request behaviour of pipeline.extract.model.openai_compat (why each bound exists: a document never loops).
    timeout_s: float = Field(60.0, gt=0, validation_alias="IDFLOW_OPENAI_TIMEOUT_S",
                             description="per HTTP request")
    max_attempts: int = Field(4, ge=1, le=10, validation_alias="IDFLOW_OPENAI_MAX_ATTEMPTS",
                              description="HTTP attempts per request, first one included")
    backoff_base_s: float = Field(0.5, ge=0, validation_alias="IDFLOW_OPENAI_BACKOFF_BASE_S",
                                  description="first retry's backoff, doubled per attempt, with jitter")
    backoff_max_s: float = Field(20.0, ge=0, validation_alias="IDFLOW_OPENAI_BACKOFF_MAX_S",
                                 description="longest backoff between attempts")
    max_retry_after_s: float = Field(60.0, ge=0, validation_alias="IDFLOW_OPENAI_MAX_RETRY_AFTER_S",
                                     description="a longer Retry-After fails the document as rate_limited")
    breaker_threshold: int = Field(8, ge=1, validation_alias="IDFLOW_OPENAI_BREAKER_THRESHOLD",
                                   description="consecutive endpoint failures that open the circuit")
    breaker_cooldown_s: float = Field(30.0, ge=0, validation_alias="IDFLOW_OPENAI_BREAKER_COOLDOWN_S",
                                      description="open circuit waits this long before one probe request")
    max_tokens: int = Field(256, ge=16, le=4096, validation_alias="IDFLOW_OPENAI_MAX_TOKENS",
                            description="answer length cap per request")
    use_json_schema: bool = Field(True, validation_alias="IDFLOW_OPENAI_USE_JSON_SCHEMA",
                                  description="send response_format json_schema (falls back when refused)")
    logprobs: bool = Field(True, validation_alias="IDFLOW_OPENAI_LOGPROBS",
                           description="ask for token log-probabilities, evidence for each field's confidence "
                                       "(dropped for the run when the endpoint refuses them)")
    crosscheck: bool = Field(True, validation_alias="IDFLOW_OPENAI_CROSSCHECK",
                             description="read the fields the answer's own checks do not prove (a PRC card's name "
                                         "and validity, a name its zone does not confirm) again with the embedded "
                                         "OCR, beside the requests: a field both read alike gets at least the "
                                         "embedded table's confidence, another value sends the document to a "
                                         "person (costs an OCR reading of those pages on this machine's CPU)")
    prompt_lang: Literal["en", "zh"] = Field("en", validation_alias="IDFLOW_OPENAI_PROMPT_LANG",
                                             description="language of the instruction sent with each page")
    price_prompt_per_mtok: float = Field(0.0, ge=0, validation_alias="IDFLOW_OPENAI_PRICE_PROMPT_PER_MTOK",
                                         description="price per million prompt tokens, for the run's cost estimate")
    price_completion_per_mtok: float = Field(0.0, ge=0,
                                             validation_alias="IDFLOW_OPENAI_PRICE_COMPLETION_PER_MTOK",
                                             description="price per million completion tokens")

    _clean_key = field_validator("api_key", mode="before")(clean_api_key)

    @field_validator("base_url")
    @classmethod
    def _stripped(cls, value: str) -> str:
        """Only tidied here: whether it is an http(s) URL is the openai backend's configuration check
        (`pipeline.extract.registry`), so a mistyped URL refuses the runs that use it and no other."""
        return value.strip()

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str | None) -> str | None:
        """Blank is not a model id: it counts as unset, which a run using this endpoint refuses."""
        return value.strip() or None if value is not None else None


POOL_FILE = "pool.json"
PID_FILE = "pids.json"
STATS_FILE = "pool-stats.json"


class VllmSettings(BaseSettings):
    """Everything `idflow vllm ...` and the `vllm` backend need; environment prefix `IDFLOW_VLLM_`.

    Where the endpoints come from, in order: `IDFLOW_VLLM_ENDPOINTS` (comma-separated base URLs such as
    `http://127.0.0.1:8004/v1`, with `IDFLOW_VLLM_MODEL`), else the pool file that `idflow vllm up` wrote in
    `IDFLOW_VLLM_STATE_DIR`. The key is only ever read from `IDFLOW_VLLM_API_KEY` (never stored in a file)."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_VLLM_", env_file=".env", extra="ignore",
                                      hide_input_in_errors=True)  # an error's text never carries the key

    endpoints: str = Field("", description="comma-separated base URLs; empty: read the pool file")
    api_key: SecretStr | None = Field(None, description="the servers' key; read only from the environment")
    model: str | None = Field(None, description="served model name the endpoints answer to")
    state_dir: Path = Field(Path(".idflow/vllm"), description="pid file, pool file, server logs")
    # launch
    serve_command: str = Field("vllm serve", description="how to run `vllm serve` (e.g. a venv's bin/vllm)")
    host: str = Field("127.0.0.1", description="documents are personal data: loopback unless asked otherwise")
    port_base: int = Field(8004, ge=1, le=65535, description="port of the first server; one more per GPU")
    prompt_budget_tokens: int = Field(1024, ge=64, description="instruction + chat template + repair turn")
    extra_args: str = Field("", description="more `vllm serve` flags, shell syntax, appended as given")
    startup_timeout_s: float = Field(1800.0, gt=0, description="load + profiling + graphs, per server")
    stall_after_s: float = Field(180.0, gt=0, description="log silence that makes the watchdog speak")
    stop_timeout_s: float = Field(30.0, gt=0, description="SIGTERM grace before SIGKILL")
    # routing
    per_endpoint_concurrency: int = Field(32, ge=1, le=1024, description="requests in flight per server")
    attempts_per_endpoint: int = Field(2, ge=1, le=10, description="HTTP attempts before trying another server")
    eject_after: int = Field(3, ge=1, description="consecutive failures that take a server out of rotation")
    probe_after_s: float = Field(10.0, ge=0, description="wait before probing an ejected server's /health")
    fallback: Literal["none", "openai"] = Field("none", description="when no server is healthy")

    _clean_key = field_validator("api_key", mode="before")(clean_api_key)

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @property
    def serve_argv(self) -> list[str]:
        return shlex.split(self.serve_command)

    @property
    def pool_file(self) -> Path:
        return self.state_dir / POOL_FILE

    @property
    def pid_file(self) -> Path:
        return self.state_dir / PID_FILE

    @property
    def stats_file(self) -> Path:
        return self.state_dir / STATS_FILE

    @property
    def served_model(self) -> str:
        """The model id for the run fingerprint: IDFLOW_VLLM_MODEL, else the pool file's, else "" (no pool)."""
        try:
            return self.model or self.resolve_pool().model
        except (ValueError, KeyError, OSError):
            return ""

    def resolve_pool(self) -> PoolConfig:
        """Endpoints and model from the environment, else from the pool file; a clear error when neither."""
        if self.endpoints.strip():
            urls = [u.strip().rstrip("/") for u in self.endpoints.split(",") if u.strip()]
            bad = [u for u in urls if not _is_http_url(u)]
            if bad:
                raise ValueError(f"IDFLOW_VLLM_ENDPOINTS: {', '.join(bad)} is not an http(s) URL (expected e.g. "
                                 "http://127.0.0.1:8000/v1, comma-separated)")
            if not self.model:
                raise ValueError("IDFLOW_VLLM_ENDPOINTS is set but IDFLOW_VLLM_MODEL is not: use the "
                                 "--served-model-name of the servers")
            return PoolConfig(urls, self.model, source="IDFLOW_VLLM_ENDPOINTS")
        if not self.pool_file.is_file():
            raise ValueError(f"no vLLM endpoints: set IDFLOW_VLLM_ENDPOINTS or start servers with "
                             f"`idflow vllm up` (no pool file at {self.pool_file})")
        data = json.loads(self.pool_file.read_text(encoding="utf-8"))
        return PoolConfig([str(u) for u in data["endpoints"]], self.model or str(data["model"]),
                          source=str(self.pool_file))


def _is_http_url(url: str) -> bool:
    try:
        http_base_url(url, "IDFLOW_VLLM_ENDPOINTS")
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """The endpoints a pool routes to (base URLs ending in /v1) and the model id they serve."""

    endpoints: list[str]
    model: str
    source: str  # where they came from, for messages


def default_calibration_dir() -> Path:
    """The per-user data folder for fitted tables: `$XDG_DATA_HOME/idflow/calibration` (default
    `~/.local/share/idflow/calibration`)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "idflow" / "calibration"


class CalibrationSettings(BaseSettings):
    """Where fitted confidence tables live (`pipeline.trust.table`). Not part of the fingerprint: a refit changes
    what a confidence means, not what was read, so it never makes documents eligible for re-reading."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_CALIBRATION_", env_file=".env", extra="ignore")

    dir: Path = Field(default_factory=default_calibration_dir,
                      description="folder of the tables `idflow calibrate` fits, one per backend + model + prompt "
                                  "(default $XDG_DATA_HOME/idflow/calibration)")
    raw_scores: bool = Field(False, description="keep raw field scores instead of calibrated confidences (what "
                                                "`idflow calibrate` fits on; not for production runs)")


class ReviewSettings(BaseSettings):
    """IDFLOW_REVIEW_THRESHOLD: a record whose least confident field is below it goes to a person."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_REVIEW_", env_file=".env", extra="ignore")

    # What is not accepted at it is exactly what a person sees.
    threshold: float = Field(AUTO_ACCEPT_THRESHOLD, ge=0, le=1,
                             description="auto-accept threshold on the least field confidence")


CANARY_MANIFEST_NAME = "manifest.json"


class CanarySettings(BaseSettings):
    """IDFLOW_CANARY_DIR, IDFLOW_CANARY_MIN_ACCURACY: the known-answer documents every nightly run reads."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_CANARY_", env_file=".env", extra="ignore")

    dir: Path | None = Field(None, description="known-answer documents every nightly run reads: a folder with "
                                               "manifest.json (the `idflow eval` format) or the manifest itself; "
                                               "unset: no canary")
    # Canary documents are chosen to be read right: a healthy backend scores 1.0 on clean ones, so one wrong field
    # in twenty is already worth a look.
    min_accuracy: float = Field(0.95, ge=0, le=1, description="canary field accuracy below which the nightly run "
                                                             "emits idflow.canary.degraded")

    def manifest(self) -> Path | None:
        if self.dir is None:
            return None
        return self.dir if self.dir.suffix == ".json" else self.dir / CANARY_MANIFEST_NAME


class ScheduleSettings(BaseSettings):
    """When the deployments `idflow serve` starts run, and how `idflow sharded` cuts a folder."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_", env_file=".env", extra="ignore")

    timezone: str = Field("Asia/Shanghai", description="time zone of the nightly and retry schedules")
    nightly_cron: str = Field("0 2 * * *", description="when the nightly run starts (cron)")
    retry_cron: str = Field("0 6 * * *", description="when the failure-queue retry starts (cron)")
    # Files per shard: minutes of work on one machine, a few hundred shards a night.
    shard_size: int = Field(2000, ge=1, description="files per shard of `idflow sharded`")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="IDFLOW_", env_file=".env", extra="ignore")

    backend: Backend = Field("ocr", description="which backend reads the pages")
    concurrency: int = Field(4, ge=1, le=256, description="documents in flight at once")
    # A batch's task run costs ~30 ms of CPU between the run and the Prefect server (its states, events and log
    # line), against ~40 ms a document on the VLM path: 64 keeps that near 1 %, and a 10,000-page night at ~160
    # task runs, well below the thousands that slow a Prefect server down, while Dask still gets work in pieces.
    batch_size: int = Field(64, ge=1, le=1024, description="documents per Prefect task")
    flush_every: int = Field(500, ge=1, description="documents per Parquet file; a crash loses at most this many")
    hybrid_vlm: VlmBackend = Field("openai", description="the VLM the hybrid backend escalates to")
    hybrid_threshold: float = Field(AUTO_ACCEPT_THRESHOLD, ge=0, le=1,
                                    description="OCR field confidence below which hybrid escalates")
    # Read by the commands that start the local server (`flows/local_server.py`). The UI costs the server no memory
    # and no start-up time beyond the noise (`bench/bench_server_ui.py`, docs/operations.md), so it is on; off is
    # for a host that must serve no web pages.
    prefect_ui: bool = Field(True, description="the local Prefect server (no PREFECT_API_URL) serves Prefect's UI "
                                               "as well as its API; false: API only")
    # The next run within it starts in the time of its own imports; 0 stops the server when the last run ends.
    prefect_server_idle_s: float = Field(600.0, ge=0, allow_inf_nan=False,
                                         description="seconds the local Prefect server stays up after the last run "
                                                     "that used it (the last joining run's wish)")
    prepare: PrepareSettings = Field(default_factory=PrepareSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)
    review: ReviewSettings = Field(default_factory=ReviewSettings)
    canary: CanarySettings = Field(default_factory=CanarySettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
