"""Which backend a run uses: built from settings, imported lazily so the OCR path never loads HTTP clients and
the API path never loads ONNX models."""

from __future__ import annotations

import os

from pipeline.backends.base import ExtractionBackend
from pipeline.config import Settings


def make_backend(settings: Settings, kind: str | None = None) -> ExtractionBackend:
    """The configured backend (`kind` overrides `settings.backend`, for the hybrid backend's halves)."""
    kind = kind or settings.backend
    if kind == "ocr":
        from pipeline.backends.ocr import OcrBackend

        # ONNX Runtime already uses every core for one page; more pages at once only oversubscribe the CPU.
        return OcrBackend(workers=max(1, min(settings.concurrency, (os.cpu_count() or 2) // 2)))
    if kind == "openai":
        from pipeline.backends.openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(settings.openai, concurrency=settings.concurrency)
    if kind == "hybrid":
        from pipeline.backends.hybrid import HybridBackend

        return HybridBackend(make_backend(settings, "ocr"), make_backend(settings, settings.hybrid_vlm),
                             threshold=settings.hybrid_threshold)
    from pipeline.backends.vllm_pool import VllmPoolBackend

    return VllmPoolBackend.from_settings(settings.vllm, settings.openai, concurrency=settings.concurrency)
