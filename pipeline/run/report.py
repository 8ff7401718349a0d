"""Human-readable run reports: the markdown summary and masked tables shown in Prefect and by `idflow show`.

Kept free of Prefect so the same text is testable and printable from the CLI. Tables here are the only place
rows leave Parquet, so names and ID numbers are masked and raw model answers are left out.
"""

from __future__ import annotations

from typing import Any

from pipeline.extract.registry import escalates
from pipeline.masking import mask_id, mask_name, redact

SAMPLE_COLUMNS = ("source_path", "page", "doc_type", "issuer", "name", "id_number", "expiry_date", "expired",
                  "orientation", "rotation_applied", "visual_tokens")
CONSOLE_COLUMNS = ("source_path", "page", "doc_type", "issuer", "name", "id_number", "expiry_date", "expired",
                   "rotation_applied")
FAILURE_COLUMNS = ("source_path", "page", "stage", "reason", "retryable", "attempts", "detail")


def masked_rows(rows: list[dict[str, Any]], columns: tuple[str, ...], limit: int = 50) -> list[dict[str, Any]]:
    """First `limit` rows restricted to `columns`, names and ID numbers masked (numbers also inside paths and
    failure details), values made JSON-friendly. Full values live only in the Parquet results and the review page
    inside OUT."""
    out = []
    for row in rows[:limit]:
        clean = {c: row.get(c) for c in columns}
        if "id_number" in clean:
            clean["id_number"] = mask_id(clean["id_number"])
        if "name" in clean:
            clean["name"] = mask_name(clean["name"])
        for column in ("source_path", "detail"):
            if isinstance(clean.get(column), str):
                clean[column] = redact(clean[column])
        if row.get("expiry_long_term"):
            clean["expiry_date"] = "long-term"
        out.append({k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in clean.items()})
    return out


def conflicts_line(summary: dict[str, Any]) -> str | None:
    """One line on the run's number conflicts (numbers masked in the summary already), or None without any."""
    conflicts = summary.get("number_conflicts") or {}
    if not conflicts.get("records"):
        return None
    others = conflicts.get("other_records", 0)
    numbers = ", ".join(conflicts.get("numbers", []))
    line = (f"number conflicts: {conflicts['records']} of this run's records"
            f"{f' and {others} of other runs' if others else ''} have a document number that another document "
            f"shows with another name or expiry date ({numbers}); none is auto-accepted: see the review page")
    return redact(line)  # the numbers are masked in the summary already; masked again, as every message


def decisions_line(summary: dict[str, Any]) -> str | None:
    """`N auto-accepted, M to review, F failed` with the threshold (None for a summary written before idflow
    counted them)."""
    d = summary.get("decisions")
    if not d:
        return None
    return (f"{d['auto_accepted']} auto-accepted, {d['to_review']} to review, {d['failed']} failed "
            f"(auto-accepted: every field's confidence at least {d['threshold']:g}, no number conflict)")


def documents_line(summary: dict[str, Any]) -> str | None:
    """The run's records by expiry on the run's date and by issuer (None for an older summary)."""
    d = summary.get("decisions")
    if not d:
        return None
    issuers = ", ".join(f"{issuer} {n}" for issuer, n in d["by_issuer"].items()) or "none"
    return (f"expired on the run's date: {d['expired']} (expiry unknown or long-term: {d['expiry_unknown']}); "
            f"issuer: {issuers}")


def summary_markdown(summary: dict[str, Any], *, input_dir: str, out_dir: str) -> str:
    """The run summary as markdown: counts, the accounting check, failures by reason, tokens, speed."""
    lines = [
        f"# idflow run `{summary['run_id']}`",
        "",
        f"- input: `{redact(input_dir)}`  output: `{redact(out_dir)}`",
        f"- backend: **{summary['backend']}**  model: `{summary['model']}`",
        "",
        "| seen | results | failures | skipped | accounted |",
        "|---:|---:|---:|---:|:---:|",
        f"| {summary['seen']} | {summary['results']} | {summary['failures']} | {summary['skipped']} | "
        f"{'yes' if summary['accounted'] else '**NO**'} |",
        "",
    ]
    if line := decisions_line(summary):
        lines += [line, ""]
    if line := documents_line(summary):
        lines += [line, ""]
    if line := conflicts_line(summary):
        lines += [line, ""]
    if summary["failures_by_reason"]:
        lines += ["## Failures by reason", "", "| reason | count |", "|---|---:|"]
        lines += [f"| `{r}` | {n} |" for r, n in sorted(summary["failures_by_reason"].items())]
        lines.append("")
    if summary["skipped_by_reason"]:
        lines += ["## Skipped", "", "| reason | count |", "|---|---:|"]
        lines += [f"| `{r}` | {n} |" for r, n in sorted(summary["skipped_by_reason"].items())]
        lines.append("")
    if summary.get("results_by_backend"):
        lines += ["## Results by backend", "", "| backend | results |", "|---|---:|"]
        lines += [f"| `{b}` | {n} |" for b, n in sorted(summary["results_by_backend"].items())]
        if escalates(summary["backend"]):
            lines.append(f"\nVLM calls saved by the OCR pass: **{summary['vlm_calls_saved']}**")
        lines.append("")
    lines += [
        "## Cost and speed",
        "",
        f"- visual tokens (predicted): {summary['visual_tokens']}",
        f"- prompt / completion tokens: {summary['prompt_tokens']} / {summary['completion_tokens']}",
        f"- estimated cost: {summary['estimated_cost']}",
        f"- latency p50 / p95: {summary['latency_ms_p50']} ms / {summary['latency_ms_p95']} ms",
        f"- elapsed: {summary['elapsed_s']} s, throughput: {summary['docs_per_s']} documents/s",
    ]
    return "\n".join(lines)
