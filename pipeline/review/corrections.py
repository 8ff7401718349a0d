"""Corrections made by people, and the merged view that prefers them (`final_records`).

A correction is final: once a person has decided on a document (`sha256:page`), `final_records` shows the
person's values instead of the machine's, `idflow show` reports it, and the retry flow leaves it alone
(`corrected_keys`). Corrections go through the same JSON Schema and checksum validation as machine output
(`pipeline.validate.field_errors`), so a mistyped check digit is refused, not stored.

Layout: `OUT/corrections/run_date=YYYY-MM-DD/part-<unique>-00000.parquet`, one atomic part per saved
correction (temp name + rename, as for results), so concurrent reviewers never overwrite each other.
Nothing is deleted; the latest correction of a document wins.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

from pipeline.datamodel import FIELD_NAMES
from pipeline.store.parquet import RESULT_SCHEMA, done_keys, latest_results, read_dataset, write_part
from pipeline.validate import field_errors

CORRECTIONS = "corrections"
EDITABLE_FIELDS: tuple[str, ...] = ("doc_type", *FIELD_NAMES)
Decision = Literal["corrected", "confirmed", "cannot be read"]
DECISIONS: tuple[str, ...] = ("corrected", "confirmed", "cannot be read")

CORRECTION_SCHEMA = pa.schema([
    pa.field("sha256", pa.string(), nullable=False),
    pa.field("page", pa.int32(), nullable=False),
    pa.field("source_path", pa.string(), nullable=False),
    pa.field("run_id", pa.string(), nullable=False),  # the run whose output was reviewed
    pa.field("who", pa.string(), nullable=False),
    pa.field("when", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("decision", pa.string(), nullable=False),  # corrected | confirmed | cannot be read
    *[pa.field(f"{name}_{side}", pa.string()) for name in EDITABLE_FIELDS for side in ("before", "after")],
])

FINAL_SCHEMA = pa.schema([
    *(RESULT_SCHEMA.field(name) for name in ("source_path", "page", "sha256", "doc_type", "name", "id_number",
                                             "expiry_date", "expiry_long_term")),
    pa.field("decided_by", pa.string(), nullable=False),  # "machine" | "person"
    pa.field("decision", pa.string()),  # the person's decision; None for machine records
    pa.field("who", pa.string()),
    pa.field("when", pa.timestamp("us", tz="UTC")),
    pa.field("run_id", pa.string(), nullable=False),  # the run that made the machine record or was reviewed
])


@dataclass(frozen=True)
class Correction:
    """One person's decision on one document: the values before (machine) and after (person)."""

    sha256: str
    page: int
    source_path: str
    run_id: str
    who: str
    decision: Decision
    before: dict[str, str | None]
    after: dict[str, str | None]

    @property
    def key(self) -> str:
        return f"{self.sha256}:{self.page}"

    def row(self, when: datetime) -> dict[str, Any]:
        row: dict[str, Any] = {"sha256": self.sha256, "page": self.page, "source_path": self.source_path,
                               "run_id": self.run_id, "who": self.who, "when": when, "decision": self.decision}
        for name in EDITABLE_FIELDS:
            row[f"{name}_before"] = self.before.get(name)
            row[f"{name}_after"] = self.after.get(name)
        return row


def clean_values(values: dict[str, Any]) -> dict[str, str | None]:
    """What a person typed, as field values: trimmed, empty means "not on the page", ID numbers upper case
    without spaces (a typed `x` check character is the same `X`)."""
    cleaned: dict[str, str | None] = {}
    for name in EDITABLE_FIELDS:
        value = values.get(name)
        text = "" if value is None else str(value).strip()
        if name == "id_number":
            text = "".join(text.split()).upper()
        cleaned[name] = text or None
    return cleaned


def correction_problems(after: dict[str, str | None], orientation: str | None) -> list[str]:
    """Why corrected values are refused (JSON Schema, then checksum and calendar checks); empty = valid.

    The same checks machine output passes; `orientation` is not asked of people and is carried over."""
    fields = {**after, "orientation": orientation if orientation in ("landscape", "portrait") else "landscape"}
    return field_errors(fields)


def decide(before: dict[str, str | None], after: dict[str, str | None]) -> Decision:
    """"confirmed" when the person kept every machine value, else "corrected"."""
    return "confirmed" if all(before.get(k) == after.get(k) for k in EDITABLE_FIELDS) else "corrected"


def write_corrections(out_dir: Path, corrections: list[Correction], *, when: datetime | None = None) -> Path | None:
    """Append corrections as one atomic Parquet part with a unique name; None when there is nothing to write."""
    if not corrections:
        return None
    now = when or datetime.now(timezone.utc)
    return write_part(out_dir, CORRECTIONS, CORRECTION_SCHEMA, [c.row(now) for c in corrections],
                      run_id=uuid.uuid4().hex[:16], run_date=now.date(), part=0)


def read_corrections(out_dir: Path) -> pa.Table | None:
    """Every correction ever saved under OUT, or None before the first."""
    return read_dataset(out_dir, CORRECTIONS, CORRECTION_SCHEMA)


def latest_corrections(out_dir: Path) -> dict[str, dict[str, Any]]:
    """`sha256:page` -> the latest correction row of that document."""
    table = read_corrections(out_dir)
    latest: dict[str, dict[str, Any]] = {}
    for row in sorted(table.to_pylist() if table is not None else [], key=lambda r: r["when"]):
        latest[f"{row['sha256']}:{row['page']}"] = row
    return latest


def corrected_keys(out_dir: Path) -> set[str]:
    """Documents (`sha256:page`) a person has decided on: final, never retried or overwritten by a run."""
    table = read_corrections(out_dir)
    if table is None:
        return set()
    return {f"{r['sha256']}:{r['page']}" for r in table.select(["sha256", "page"]).to_pylist()}


def not_to_read_again(out_dir: Path, fingerprint: str | None) -> frozenset[str]:
    """Documents (`sha256:page`) a run skips as done: a result made with these settings (with None: by any run,
    as a batch import asks), or a person's decision (final: a failure a person filled in or declared unreadable is
    not extracted, and paid for, again)."""
    return frozenset(done_keys(out_dir, fingerprint) | corrected_keys(out_dir))


def final_records(out_dir: Path) -> pa.Table:
    """The merged view of OUT: one row per document, a person's correction preferred over the machine.

    Machine rows are the latest result per document (over all runs); a corrected document shows the person's
    values with `decided_by="person"` and the decision (a "cannot be read" document keeps no field values);
    a failed document a person filled in appears here although it has no result row. Documents that only
    failed and nobody corrected are not records and stay in the failure queue.
    """
    rows: dict[str, dict[str, Any]] = {}
    latest = latest_results(out_dir, ["source_path", "page", "sha256", "doc_type", "name", "id_number",
                                      "expiry_date", "expiry_long_term", "run_id", "processed_at"])
    for key, row in latest.items():
        row.pop("processed_at")
        rows[key] = {**row, "decided_by": "machine", "decision": None, "who": None, "when": None}
    for key, c in latest_corrections(out_dir).items():
        values = {name: c[f"{name}_after"] for name in EDITABLE_FIELDS}
        if c["decision"] == "cannot be read":
            values = dict.fromkeys(EDITABLE_FIELDS)
        expiry = values["expiry_date"]
        rows[key] = {"source_path": c["source_path"], "page": c["page"], "sha256": c["sha256"],
                     "doc_type": values["doc_type"], "name": values["name"], "id_number": values["id_number"],
                     "expiry_date": None if expiry in (None, "long-term") else date.fromisoformat(expiry),
                     "expiry_long_term": expiry == "long-term", "decided_by": "person",
                     "decision": c["decision"], "who": c["who"], "when": c["when"],
                     "run_id": rows.get(key, {}).get("run_id") or c["run_id"]}
    ordered = sorted(rows.values(), key=lambda r: (r["source_path"], r["page"]))
    return pa.Table.from_pylist(ordered, schema=FINAL_SCHEMA)
