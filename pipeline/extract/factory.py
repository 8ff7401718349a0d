"""Which backend a run uses: the registered kind's spec builds it (`pipeline.extract.registry`), importing its
implementation only then, so the OCR path never loads HTTP clients and the API path never loads ONNX models."""

from __future__ import annotations

from pipeline.extract.base import ExtractionBackend
from pipeline.extract.registry import backend_spec
from pipeline.settings import Settings


def make_backend(settings: Settings, kind: str | None = None) -> ExtractionBackend:
    """The configured backend (`kind` overrides `settings.backend`, for the hybrid backend's halves); an unknown
    kind is a ValueError naming the known ones."""
    return backend_spec(kind or settings.backend).build(settings)
