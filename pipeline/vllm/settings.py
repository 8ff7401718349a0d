"""Settings of the local vLLM pool: how servers are started (`idflow vllm up`) and how the pool routes.

A separate object from `pipeline.settings.Settings` so the pool can be configured, launched and tested without
touching the settings every other backend shares; `Settings` may embed it as `vllm: VllmSettings`.

Where the endpoints come from, in order: `IDFLOW_VLLM_ENDPOINTS` (comma-separated base URLs such as
`http://127.0.0.1:8004/v1`, with `IDFLOW_VLLM_MODEL`), else the pool file that `idflow vllm up` wrote in
`IDFLOW_VLLM_STATE_DIR`. The key is only ever read from `IDFLOW_VLLM_API_KEY` (never stored in a file).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.api_keys import clean_api_key
from pipeline.urls import http_base_url

POOL_FILE = "pool.json"
PID_FILE = "pids.json"
STATS_FILE = "pool-stats.json"


class VllmSettings(BaseSettings):
    """Everything `idflow vllm ...` and the `vllm` backend need; environment prefix `IDFLOW_VLLM_`."""

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
