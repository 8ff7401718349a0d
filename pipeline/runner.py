"""One batch through prepare -> extract -> validate, and the accounting of a whole run.

Plain async functions with no Prefect imports: the flow in `flows/extract.py` only schedules batches and
publishes artifacts, so everything here is testable without a server.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.backends.base import ExtractionBackend
from pipeline.config import Settings
from pipeline.datamodel import DocumentRef, Failure, Record, Skipped
from pipeline.prepare import prepare_page
from pipeline.store import failure_row, result_row
from pipeline.validate import validate


def make_backend(settings: Settings, kind: str | None = None) -> ExtractionBackend:
    """The configured backend; imports lazily so the OCR path never loads HTTP clients and vice versa."""
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


@dataclass
class BatchRows:
    """What a batch hands to the writer: flat rows only, so no pixels outlive the batch."""

    results: list[dict[str, Any]] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)


async def process_document(ref: DocumentRef, settings: Settings, backend: ExtractionBackend,
                           prepare_slots: asyncio.Semaphore) -> Record | Failure:
    """One page end to end. Never raises for a bad document: every path ends in a Record or a Failure."""
    async with prepare_slots:
        prepared = await asyncio.to_thread(prepare_page, ref, settings.prepare)
    if isinstance(prepared, Failure):
        return prepared
    (extraction,) = await backend.extract([prepared])
    if isinstance(extraction, Failure):
        return extraction
    return validate(extraction, prepared)


async def process_batch(refs: Sequence[DocumentRef], settings: Settings, backend: ExtractionBackend, *,
                        prepare_slots: asyncio.Semaphore, run_id: str, fingerprint: str) -> BatchRows:
    outcomes = await asyncio.gather(*(process_document(r, settings, backend, prepare_slots) for r in refs))
    rows = BatchRows()
    for outcome in outcomes:
        if isinstance(outcome, Record):
            rows.results.append(result_row(outcome, fingerprint=fingerprint, run_id=run_id))
        else:
            rows.failures.append(failure_row(outcome, fingerprint=fingerprint, run_id=run_id))
    return rows


@dataclass
class RunTally:
    """Counts for the run summary. `seen` is counted at discovery, the rest at the end of each document, so
    `seen == results + failures + skipped` is a real check that nothing was lost or counted twice."""

    seen: int = 0
    results: int = 0
    failures: int = 0
    skipped: int = 0
    skipped_by_reason: Counter[str] = field(default_factory=Counter)
    results_by_backend: Counter[str] = field(default_factory=Counter)
    failures_by_reason: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    visual_tokens: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def add_skip(self, item: Skipped) -> None:
        self.skipped += 1
        self.skipped_by_reason[str(item.reason)] += 1

    def add_rows(self, rows: BatchRows) -> None:
        self.results += len(rows.results)
        self.failures += len(rows.failures)
        self.results_by_backend.update(row["backend"] for row in rows.results)
        for row in rows.results:
            self.prompt_tokens += row["prompt_tokens"] or 0
            self.completion_tokens += row["completion_tokens"] or 0
            self.visual_tokens += row["visual_tokens"] or 0
            self.latencies_ms.append(row["latency_ms"] or 0.0)
        self.failures_by_reason.update(row["reason"] for row in rows.failures)

    def summary(self, *, run_id: str, settings: Settings) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        lat = sorted(self.latencies_ms)
        pct = (lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 1)) if lat else (lambda q: None)
        return {
            "run_id": run_id,
            "backend": settings.backend,
            "model": settings.model_name,
            "fingerprint": settings.fingerprint(),
            "seen": self.seen,
            "results": self.results,
            "failures": self.failures,
            "skipped": self.skipped,
            "accounted": self.seen == self.results + self.failures + self.skipped,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "failures_by_reason": dict(self.failures_by_reason),
            "results_by_backend": dict(self.results_by_backend),
            # hybrid: pages the OCR settled alone, i.e. VLM calls not made
            "vlm_calls_saved": self.results_by_backend.get("hybrid:ocr", 0),
            "visual_tokens": self.visual_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated_cost": round(self.prompt_tokens / 1e6 * settings.openai.price_prompt_per_mtok
                                    + self.completion_tokens / 1e6 * settings.openai.price_completion_per_mtok, 6),
            "latency_ms_p50": round(statistics.median(lat), 1) if lat else None,
            "latency_ms_p95": pct(0.95),
            "elapsed_s": round(elapsed, 2),
            "docs_per_s": round((self.results + self.failures) / elapsed, 3) if elapsed > 0 else None,
        }
