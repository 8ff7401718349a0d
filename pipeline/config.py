"""One typed settings object for the whole pipeline (environment, `.env`, CLI overrides).

Why one object: the idempotency fingerprint is derived from it, so a change to any setting that can change a
result (backend, model, prompt, schema, preprocessing) makes previously done documents eligible again.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib.resources import files
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.api_keys import clean_api_key
from pipeline.backends.registry import BACKEND_NAMES, OCR, OPENAI, VLM_NAMES, backend_spec
from pipeline.vllm.settings import VllmSettings

# Read through importlib.resources so an installed wheel finds it wherever it runs from (`schemas/` at the
# repository root is a symlink to this folder, kept for the README's references).
SCHEMA_PATH = files("pipeline").joinpath("schemas", "id_document.schema.json")

# The registered backend kinds (pipeline.backends.registry); a wrong name is refused listing them.
Backend = Literal[BACKEND_NAMES]  # type: ignore[valid-type]
VlmBackend = Literal[VLM_NAMES]  # type: ignore[valid-type]


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
    # Request behaviour of pipeline.backends.openai_compat (why each bound exists: a document never loops).
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
        (`pipeline.backends.registry`), so a mistyped URL refuses the runs that use it and no other."""
        return value.strip()

    @field_validator("model")
    @classmethod
    def _model_id(cls, value: str | None) -> str | None:
        """Blank is not a model id: it counts as unset, which a run using this endpoint refuses."""
        return value.strip() or None if value is not None else None


def default_calibration_dir() -> Path:
    """The per-user data folder for fitted tables: `$XDG_DATA_HOME/idflow/calibration` (default
    `~/.local/share/idflow/calibration`)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "idflow" / "calibration"


class CalibrationSettings(BaseSettings):
    """Where fitted confidence tables live (`pipeline.calibration`). Not part of the fingerprint: a refit changes
    what a confidence means, not what was read, so it never makes documents eligible for re-reading."""

    model_config = SettingsConfigDict(env_prefix="IDFLOW_CALIBRATION_", env_file=".env", extra="ignore")

    dir: Path = Field(default_factory=default_calibration_dir,
                      description="folder of the tables `idflow calibrate` fits, one per backend + model + prompt "
                                  "(default $XDG_DATA_HOME/idflow/calibration)")
    raw_scores: bool = Field(False, description="keep raw field scores instead of calibrated confidences (what "
                                                "`idflow calibrate` fits on; not for production runs)")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="IDFLOW_", env_file=".env", extra="ignore")

    backend: Backend = Field(OCR.name, description="which backend reads the pages")
    concurrency: int = Field(4, ge=1, le=256, description="documents in flight at once")
    # A batch's task run costs ~30 ms of CPU between the run and the Prefect server (its states, events and log
    # line), against ~40 ms a document on the VLM path: 64 keeps that near 1 %, and a 10,000-page night at ~160
    # task runs, well below the thousands that slow a Prefect server down, while Dask still gets work in pieces.
    batch_size: int = Field(64, ge=1, le=1024, description="documents per Prefect task")
    flush_every: int = Field(500, ge=1, description="documents per Parquet file; a crash loses at most this many")
    hybrid_vlm: VlmBackend = Field(OPENAI.name, description="the VLM the hybrid backend escalates to")
    # the documented auto-accept threshold: what the OCR alone would not auto-accept is what the model is asked about
    hybrid_threshold: float = Field(0.95, ge=0, le=1, description="OCR field confidence below which hybrid escalates")
    prepare: PrepareSettings = Field(default_factory=PrepareSettings)
    openai: OpenAISettings = Field(default_factory=OpenAISettings)
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)

    @property
    def model_name(self) -> str:
        return backend_spec(self.backend).model_id(self)

    def fingerprint_material(self) -> dict[str, object]:
        """Everything that can change a result: the backend, its model, the schema, the image budget, and what
        the backend's spec adds (a VLM's prompt; the hybrid's threshold and VLM)."""
        return {
            "backend": self.backend,
            "model": self.model_name,
            "schema": hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest(),
            "prepare": self.prepare.model_dump(),
            **backend_spec(self.backend).fingerprint_material(self),
        }

    def fingerprint(self) -> str:
        """Hash of `fingerprint_material()`; part of the idempotency key."""
        blob = json.dumps(self.fingerprint_material(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
