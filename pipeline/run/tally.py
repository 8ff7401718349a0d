"""The accounting of a run: what was seen, what became of it, and the run summary built from those counts.

`seen` is counted when discovery hands an item over and the rest when its outcome arrives, so
`seen == results + failures + skipped` is a real check that nothing was lost or counted twice.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from pipeline.datamodel import FIELD_NAMES, Failure, Record, Skipped
from pipeline.extract.registry import SETTLED_BY_OCR, fingerprint, model_name
from pipeline.settings import Settings
from pipeline.store.parquet import expired


def least_confidence(record: Record) -> float:
    """A record's confidence as the review page judges it (`pipeline.review.queue.record_confidence`): its least
    sure field, a field without a measured confidence counting 0."""
    states = record.extraction.field_states
    return min(0.0 if (r := states.get(n)) is None or r.confidence is None else float(r.confidence)
               for n in FIELD_NAMES)


@dataclass(frozen=True, slots=True)
class Decision:
    """What a desk decides first about one record: below the auto-accept threshold, expired (None: unknown), who
    issued it (None: the page does not say)."""

    below_threshold: bool
    expired: bool | None
    issuer: str | None


@dataclass
class RunTally:
    """Counts for the run summary, fed one typed outcome at a time."""

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
    threshold: float = 0.95  # the auto-accept threshold (the session sets the review settings' one)
    run_date: date = field(default_factory=date.today)  # what `expired` is judged on (the session: the parts')
    decisions: dict[str, Decision] = field(default_factory=dict)  # `sha256:page` -> each stored record's

    @property
    def finished(self) -> int:
        return self.results + self.failures + self.skipped

    def add(self, outcome: Record | Failure | Skipped) -> None:
        if isinstance(outcome, Skipped):
            self.skipped += 1
            self.skipped_by_reason[str(outcome.reason)] += 1
        elif isinstance(outcome, Failure):
            self.failures += 1
            self.failures_by_reason[str(outcome.reason)] += 1
            self.prompt_tokens += outcome.prompt_tokens  # an answer that failed validation was billed too
            self.completion_tokens += outcome.completion_tokens
        else:
            ex = outcome.extraction
            self.results += 1
            self.results_by_backend[ex.backend] += 1
            self.prompt_tokens += ex.prompt_tokens or 0
            self.completion_tokens += ex.completion_tokens or 0
            self.visual_tokens += outcome.prepared.visual_tokens or 0
            self.latencies_ms.append(ex.latency_ms or 0.0)
            self.decisions[ex.ref.key] = Decision(least_confidence(outcome) < self.threshold,
                                                  self._expired(outcome), ex.issuer)

    def _expired(self, record: Record) -> bool | None:
        try:
            return expired(record, self.run_date)
        except ValueError:  # no real date: the writer cannot store the row either, and `demote` drops it
            return None

    def demote(self, failure: Failure) -> None:
        """A result the writer could not store and stored as this failure instead (`RunWriter.demoted`)."""
        self.results -= 1
        if failure.backend in self.results_by_backend:
            self.results_by_backend[failure.backend] -= 1
        self.failures += 1
        self.failures_by_reason[str(failure.reason)] += 1
        self.decisions.pop(f"{failure.sha256}:{failure.page}", None)

    def decision_counts(self, conflicting: set[str]) -> dict[str, Any]:
        """The summary's decision counts: records auto-accepted (every field at the threshold, no number
        conflict: `conflicting` keys) and to review, as the review page lists them; failures; expired documents
        and those whose expiry is unknown; records by issuer."""
        to_review = sum(1 for key, d in self.decisions.items() if d.below_threshold or key in conflicting)
        states = Counter(d.expired for d in self.decisions.values())
        return {"threshold": self.threshold, "auto_accepted": len(self.decisions) - to_review,
                "to_review": to_review, "failed": self.failures,
                "expired": states[True], "expiry_unknown": states[None],
                "by_issuer": dict(Counter(d.issuer or "unknown" for d in self.decisions.values()).most_common())}

    def summary(self, *, run_id: str, settings: Settings) -> dict[str, Any]:
        elapsed = time.monotonic() - self.started
        lat = sorted(self.latencies_ms)
        return {
            "run_id": run_id,
            "backend": settings.backend,
            "model": model_name(settings),
            "fingerprint": fingerprint(settings),
            "seen": self.seen,
            "results": self.results,
            "failures": self.failures,
            "skipped": self.skipped,
            "accounted": self.seen == self.finished,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "failures_by_reason": dict(self.failures_by_reason),
            "results_by_backend": dict(self.results_by_backend),
            # hybrid: pages the OCR settled alone, i.e. VLM calls not made
            "vlm_calls_saved": self.results_by_backend.get(SETTLED_BY_OCR, 0),
            "visual_tokens": self.visual_tokens,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "estimated_cost": round(self.prompt_tokens / 1e6 * settings.openai.price_prompt_per_mtok
                                    + self.completion_tokens / 1e6 * settings.openai.price_completion_per_mtok, 6),
            "latency_ms_p50": round(statistics.median(lat), 1) if lat else None,
            "latency_ms_p95": round(lat[min(len(lat) - 1, int(0.95 * len(lat)))], 1) if lat else None,
            "elapsed_s": round(elapsed, 2),
            "docs_per_s": round((self.results + self.failures) / elapsed, 3) if elapsed > 0 else None,
        }
