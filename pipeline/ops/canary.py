"""Drift canaries: known-answer documents read with the run's backend and settings, scored against their truth.

An API model can change behind the same model id overnight, and nothing in a run's own output says so: its
records still validate. A canary folder (`IDFLOW_CANARY_DIR`: documents with a manifest in the `idflow eval`
format) is read by every nightly run through the same stages as a run (`pipeline.ops.evaluation.evaluate`), in memory:
its documents never reach OUT's results or failures and are not counted in any run's `seen = results + failures +
skipped`. What comes out is aggregate only (documents, field accuracy, per field accuracy, failures), never a
value or a path, so it can go into summaries, artifacts and events. Field accuracy below
`IDFLOW_CANARY_MIN_ACCURACY` is *degraded*; so is a canary that could not be read at all (a missing manifest, an
endpoint that refuses every page scores 0): a silent canary must not look like a healthy one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from pipeline.extract.registry import fingerprint, model_name
from pipeline.masking import redact
from pipeline.settings import CanarySettings, Settings

CANARY_EVENT = "idflow.canary.degraded"  # a Prefect event name: stable, automations match it
CANARY_RESOURCE = "idflow.canary."  # + backend name: the event's resource id
CANARY_DIR = "canary"  # OUT/canary/<run id>.json: each nightly run's canary result (aggregate only)


@dataclass(frozen=True)
class CanaryReport:
    """How the canary was read; aggregate only (no value, no path)."""

    backend: str
    model: str
    fingerprint: str  # the settings' (`registry.fingerprint`): the same as the run's results carry
    min_accuracy: float
    documents: int = 0
    fields_total: int = 0
    fields_correct: int = 0
    documents_failed: int = 0  # extraction or validation failed: every field of it counts as wrong
    invented: int = 0  # fields read where the document has none
    per_field: dict[str, float] = field(default_factory=dict)
    error: str | None = None  # the canary could not be read (masked)

    @property
    def accuracy(self) -> float | None:
        return self.fields_correct / self.fields_total if self.fields_total else None

    @property
    def degraded(self) -> bool:
        return self.accuracy is None or self.accuracy < self.min_accuracy

    def as_dict(self) -> dict[str, Any]:
        accuracy = self.accuracy
        return {**asdict(self), "accuracy": None if accuracy is None else round(accuracy, 4),
                "degraded": self.degraded}

    def markdown(self) -> str:
        accuracy = "—" if self.accuracy is None else f"{self.accuracy:.4f}"
        verdict = "**DEGRADED**" if self.degraded else "healthy"
        lines = [f"# idflow drift canary: {verdict}", "",
                 f"- backend **{self.backend}**, model `{self.model}`, settings `{self.fingerprint}`",
                 f"- field accuracy **{accuracy}** (alert below {self.min_accuracy:g}): {self.fields_correct} of "
                 f"{self.fields_total} fields right over {self.documents} documents, {self.documents_failed} "
                 f"failed, {self.invented} fields invented", ""]
        if self.error:
            lines += [f"The canary could not be read: {self.error}", ""]
        if self.per_field:
            lines += ["| field | accuracy |", "|---|---:|"]
            lines += [f"| {name} | {value:.4f} |" for name, value in self.per_field.items()]
        return "\n".join(lines)


async def read_canary(settings: Settings, canary: CanarySettings | None = None) -> CanaryReport | None:
    """Read the canary documents with `settings` (the run's backend, model and prompt) and score them; None when
    no canary is set. Any error reading it is reported as a degraded canary with the (masked) reason."""
    canary = canary or settings.canary
    manifest = canary.manifest()
    if manifest is None:
        return None
    base = CanaryReport(backend=settings.backend, model=model_name(settings), fingerprint=fingerprint(settings),
                        min_accuracy=canary.min_accuracy)
    # Imported here: the engine and its backends load only when a canary is set.
    from pipeline.ops.evaluation import evaluate, load_manifest

    try:
        items = load_manifest(manifest)
        if not items:
            raise ValueError(f"{manifest} lists no scored document")
        report = await evaluate(items, settings)
    except Exception as exc:  # noqa: BLE001 - a canary that cannot be read is an alert, not a crashed nightly
        return CanaryReport(**{**asdict(base), "error": redact(f"{type(exc).__name__}: {exc}")[:300]})
    return CanaryReport(**{**asdict(base), "documents": len(report.results), "fields_total": report.fields_total,
                           "fields_correct": report.fields_correct, "invented": report.invented,
                           "documents_failed": sum(1 for r in report.results if r.failure is not None),
                           "per_field": {k: round(v, 4) for k, v in report.per_field().items()}})


def canary_fields() -> tuple[str, ...]:
    """The keys of a canary report (the event's payload, the summary's `canary`), for the reference."""
    return (*(f.name for f in fields(CanaryReport)), "accuracy", "degraded")
