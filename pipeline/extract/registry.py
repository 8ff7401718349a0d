"""Every backend kind, declared once: its name, the class that builds it, its model id, what of its settings can
change a result (fingerprint material), whether it reads the full-resolution page, and its configuration check.

This is the one map from backend names to implementations; everything else asks a spec for a property
(`is_vlm`, `vlm_of`, `reads_full_pixels`, `url_setting`, ...) instead of comparing names.

Why the implementation is named ("module:Class") and not imported: every entry point reads the settings'
fingerprint and model id from here, so this module must import no implementation, not even inside a function.
The class is resolved when a run builds its backend, which also keeps start-up light: the OCR path never loads
HTTP clients, the API path never ONNX models. The settings name the same kinds (`pipeline.settings.Backend`), so
a wrong name is refused when they are read; this module checks at import that both lists agree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pipeline.settings import BACKEND_NAMES as SETTINGS_BACKEND_NAMES
from pipeline.settings import SCHEMA_PATH, Settings, http_base_url
from pipeline.trust.key import OCR_BACKEND, ocr_model_id

if TYPE_CHECKING:
    from pipeline.extract.base import ExtractionBackend

OPENAI_NAME = "openai"  # the OpenAI-compatible kind, also a value of IDFLOW_VLLM_FALLBACK
OPENAI_URL_SETTING = "TAOTOKEN_BASE_URL"
VLLM_URL_SETTING = "IDFLOW_VLLM_ENDPOINTS"
VLLM_KEY_MISSING = "IDFLOW_VLLM_API_KEY is not set (the key `idflow vllm up` started the servers with)"


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """What a backend kind is, without loading it. `implementation` names a class with a
    `from_run_settings(settings)` classmethod (the backend a run with these settings uses)."""

    name: str
    implementation: str
    model_id: Callable[[Settings], str]
    fingerprint_material: Callable[[Settings], dict[str, Any]]
    check: Callable[[Settings], str | None]  # the configuration problem that stops a run, or None
    reads_full_pixels: bool = False  # reads `PreparedImage.full_pixels` (the prepare stage must keep them)
    is_vlm: bool = False  # sends pages to a model endpoint itself
    url_setting: str | None = None  # the setting that names its endpoints, quoted in a failure's fix
    pooled: bool = False  # its endpoints are a pool (checked one by one by `idflow doctor`)
    escalates: bool = False  # reads with the OCR first and asks a VLM only what that leaves open
    endpoint_check: Callable[[Settings], str | None] = lambda settings: None  # its endpoint settings alone

    def vlm_of(self, settings: Settings) -> BackendSpec | None:
        """The VLM kind pages are sent to with these settings (itself, the hybrid's VLM, or None)."""
        if self.is_vlm:
            return self
        if self.escalates:
            return backend_spec(settings.hybrid_vlm)
        return None

    def build(self, settings: Settings) -> ExtractionBackend:
        from pkgutil import resolve_name

        return resolve_name(self.implementation).from_run_settings(settings)


def _prompt_material(settings: Settings) -> dict[str, Any]:
    """What changes a VLM's answer besides its model: the instruction's version and language, and whether the
    answer is constrained by the JSON schema."""
    from pipeline.extract.model.prompts import PROMPT_VERSION

    return {"prompt": [PROMPT_VERSION, settings.openai.prompt_lang, settings.openai.use_json_schema]}


def _hybrid_vlm(settings: Settings) -> BackendSpec:
    vlm = HYBRID.vlm_of(settings)
    assert vlm is not None
    return vlm


def _hybrid_material(settings: Settings) -> dict[str, Any]:
    return {"hybrid": [settings.hybrid_vlm, settings.hybrid_threshold],
            **_hybrid_vlm(settings).fingerprint_material(settings)}


def _openai_url_problem(settings: Settings) -> str | None:
    """A base URL that is no http(s) URL with a host (said without the value: a URL may carry credentials)."""
    try:
        http_base_url(settings.openai.base_url, f"{OPENAI_URL_SETTING} (or IDFLOW_OPENAI_BASE_URL)")
    except ValueError as exc:
        return str(exc)
    return None


def _check_openai(settings: Settings) -> str | None:
    """The endpoint's URL, key and model, all before any document is read. Why here and not in the settings: a
    mistyped URL must refuse the runs that use it (openai, a hybrid escalating to it, a pool falling back to it),
    not an OCR run that never calls it."""
    if (problem := _openai_url_problem(settings)) is not None:
        return problem
    key = settings.openai.api_key
    if (key is None or not key.get_secret_value()) and not settings.openai.key_block:
        return ("TAOTOKEN_API_KEY is not set (environment, .env, or a Prefect Secret block named in "
                "IDFLOW_OPENAI_KEY_BLOCK)")
    if not settings.openai.model:
        return "TAOTOKEN_MODEL is not set: use the model id shown in the provider console"
    return None


def _check_vllm(settings: Settings) -> str | None:
    try:
        settings.vllm.resolve_pool()
    except ValueError as exc:
        return str(exc)
    if settings.vllm.api_key is None:
        return VLLM_KEY_MISSING
    if settings.vllm.fallback == OPENAI_NAME:  # the endpoint a run falls back to when no server is healthy
        return _openai_url_problem(settings)
    return None


OCR = BackendSpec(
    name=OCR_BACKEND, implementation="pipeline.extract.ocr.backend:OcrBackend",
    model_id=lambda settings: ocr_model_id(), fingerprint_material=lambda settings: {},
    check=lambda settings: None, reads_full_pixels=True)
OPENAI = BackendSpec(
    name=OPENAI_NAME, implementation="pipeline.extract.model.openai_compat:OpenAICompatBackend",
    model_id=lambda settings: settings.openai.model or "", fingerprint_material=_prompt_material,
    check=_check_openai, is_vlm=True, url_setting=OPENAI_URL_SETTING, endpoint_check=_openai_url_problem)
VLLM = BackendSpec(
    name="vllm", implementation="pipeline.extract.model.vllm_pool:VllmPoolBackend",
    model_id=lambda settings: settings.vllm.served_model, fingerprint_material=_prompt_material,
    check=_check_vllm, is_vlm=True, url_setting=VLLM_URL_SETTING, pooled=True)
HYBRID = BackendSpec(
    name="hybrid", implementation="pipeline.extract.hybrid:HybridBackend",
    model_id=lambda settings: _hybrid_vlm(settings).model_id(settings), fingerprint_material=_hybrid_material,
    check=lambda settings: _hybrid_vlm(settings).check(settings), reads_full_pixels=True, escalates=True)

REGISTRY: dict[str, BackendSpec] = {spec.name: spec for spec in (OCR, OPENAI, VLLM, HYBRID)}
BACKEND_NAMES: tuple[str, ...] = tuple(REGISTRY)
VLM_NAMES: tuple[str, ...] = tuple(name for name, spec in REGISTRY.items() if spec.is_vlm)
# How a hybrid result the OCR settled alone is labelled (`Extraction.backend`): one VLM call not made.
SETTLED_BY_OCR = f"{HYBRID.name}:{OCR.name}"


def backend_spec(name: str) -> BackendSpec:
    """The spec of a backend name; an unknown name is refused with the list of known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}: use one of {', '.join(BACKEND_NAMES)}") from None


def find_spec(name: str | None) -> BackendSpec | None:
    """The spec of a backend name, or None for a name that is no registered kind (a test's stand-in backend,
    the doctor's probe)."""
    return REGISTRY.get(name) if name is not None else None


def escalates(name: str | None) -> bool:
    """Whether a run of this backend name counts the VLM calls its OCR pass saved (a summary's `backend`)."""
    spec = find_spec(name)
    return spec is not None and spec.escalates


def choices(names: tuple[str, ...] = BACKEND_NAMES) -> str:
    """Names as a CLI help text lists them."""
    return " | ".join(names)


if BACKEND_NAMES != SETTINGS_BACKEND_NAMES:  # a kind registered here must be a value the settings accept
    raise ImportError(f"backend kinds {BACKEND_NAMES} differ from pipeline.settings.Backend {SETTINGS_BACKEND_NAMES}")


def model_name(settings: Settings) -> str:
    """The model id of the run's backend (the OCR's release for `ocr`)."""
    return backend_spec(settings.backend).model_id(settings)


def fingerprint_material(settings: Settings) -> dict[str, object]:
    """Everything that can change a result: the backend, its model, the schema, the image budget, and what the
    backend's spec adds (a VLM's prompt; the hybrid's threshold and VLM)."""
    return {
        "backend": settings.backend,
        "model": model_name(settings),
        "schema": hashlib.sha256(SCHEMA_PATH.read_bytes()).hexdigest(),
        "prepare": settings.prepare.model_dump(),
        **backend_spec(settings.backend).fingerprint_material(settings),
    }


def fingerprint(settings: Settings) -> str:
    """Hash of `fingerprint_material(settings)`; part of the idempotency key."""
    blob = json.dumps(fingerprint_material(settings), sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
