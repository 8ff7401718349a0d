"""Consistency across the output folder: one document number read with two different names or expiry dates.

The same number on two documents of one type is either an OCR slip on one of them (a misread name, a day read
as another) or a number in use twice; a person has to look at both. The rule:

- Every document of OUT (`sha256:page`) counts once, with its current values: a person's latest decision when
  there is one (final), else its latest machine result. A document read again by a later run is that later
  reading, never a conflict with its own earlier one.
- Documents are compared within their document type, by number (upper case, no spaces): one holder's number
  legitimately appears on documents of other types with another expiry date (a PRC driving licence carries its
  holder's resident ID number) and the name written another way (Latin in a passport, Chinese on the card).
- Two documents conflict when both have a name and the names differ (ignoring case, accents, MRZ fillers and
  spacing), or both have an expiry date and the dates differ. A value missing on one side is no conflict (the
  front of a PRC card has no expiry date).
- A machine record that conflicts with any other document is flagged: it goes to a person whatever its confidence
  and is never auto-accepted. Both machine records of a pair are flagged. A document a person decided on is never
  flagged (its values are final), but a machine record that disagrees with it still is. So a conflict is resolved
  by a person's decision: correcting one side to agree clears both, and confirming both sides as they are (a number
  reused, a renewed card) clears both too.

Why computed when asked rather than stored per record: Parquet parts are immutable, and a conflict changes after
the record was written (a later run reads the same number, a person corrects one side). Computing it from OUT's
results and corrections when the review queue is built keeps every view current without rewriting parts; a run
also records, in its summary, the conflicts its own records were in when it finished. Cheap for a big OUT: only
the ten columns needed are read, the latest result per document and the numbers seen on more than one document
are found in Arrow, and only the rows of those numbers become Python objects.
"""

from __future__ import annotations

import unicodedata
from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from pipeline.masking import mask_id
from pipeline.review.corrections import latest_corrections
from pipeline.store.parquet import RESULTS, read_table

CONFLICT_REASON = "number_conflict"
COMPARED = ("name", "expiry_date")
SUMMARY_NUMBERS = 20  # masked numbers a run summary lists at most
LISTED = 20  # other documents a flagged record names at most (its page shows them)
_COLUMNS = ["sha256", "page", "source_path", "run_id", "processed_at", "doc_type", "id_number", "name",
            "expiry_date", "expiry_long_term"]
_SEP = "\x1f"  # between the document type and the number in a group key (in neither)


@dataclass(frozen=True)
class Reading:
    """One document's current values, as compared here."""

    key: str  # sha256:page
    source_path: str
    run_id: str
    doc_type: str | None
    id_number: str
    name: str | None
    expiry: str | None  # ISO date, "long-term" or None
    by_person: bool

    @property
    def group(self) -> str:
        return f"{self.doc_type or ''}{_SEP}{self.id_number}"

    def value(self, field: str) -> str | None:
        return self.name if field == "name" else self.expiry


@dataclass(frozen=True)
class Disagreement:
    other: Reading
    fields: tuple[str, ...]  # of COMPARED


@dataclass(frozen=True)
class Conflict:
    """A machine record whose number other documents of OUT show with another name or expiry date."""

    reading: Reading
    disagreements: tuple[Disagreement, ...]

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(f for f in COMPARED if any(f in d.fields for d in self.disagreements))

    def detail(self) -> str:
        """For the review page (inside OUT, where full values belong): the other documents and their values."""
        parts = []
        for d in self.disagreements:
            values = ", ".join(f"{f.replace('_', ' ')} {d.other.value(f)}" for f in d.fields)
            who = "decided by a person" if d.other.by_person else f"run {d.other.run_id}"
            parts.append(f"{d.other.source_path} ({who}) has {values}")
        return "The same number: " + "; ".join(parts)


def comparable_name(name: str) -> str:
    """A name as compared: case, accents, MRZ fillers and spacing ignored."""
    text = unicodedata.normalize("NFKD", name.replace("<", " "))
    return " ".join("".join(c for c in text if not unicodedata.combining(c)).casefold().split())


def comparable_number(number: str) -> str:
    return "".join(number.split()).upper()


def group_conflicts(readings: list[Reading]) -> dict[str, Conflict]:
    """The flagged machine records of one (type, number) group. Linear when the group agrees (the usual case: one
    document scanned many times): the group's distinct names and expiry dates are counted first, and only a group
    with two of either is compared reading by reading, each against the readings of the *other* values (at most
    `LISTED` of them kept per record for the page: a record's flag does not depend on how many disagree)."""
    by_name: dict[str, list[Reading]] = defaultdict(list)
    by_expiry: dict[str, list[Reading]] = defaultdict(list)
    names = {r.key: comparable_name(r.name) if r.name else "" for r in readings}
    for r in readings:
        if names[r.key]:
            by_name[names[r.key]].append(r)
        if r.expiry:
            by_expiry[r.expiry].append(r)
    if len(by_name) < 2 and len(by_expiry) < 2:
        return {}
    conflicts: dict[str, Conflict] = {}
    for reading in readings:
        if reading.by_person:
            continue
        others: dict[str, tuple[Reading, list[str]]] = {}
        for field, buckets, own in (("name", by_name, names[reading.key]), ("expiry_date", by_expiry, reading.expiry)):
            for value, bucket in buckets.items() if own else ():
                for other in bucket if value != own else ():
                    if other.key in others:
                        others[other.key][1].append(field)
                    elif len(others) < LISTED:
                        others[other.key] = (other, [field])
        if others:
            conflicts[reading.key] = Conflict(reading, tuple(Disagreement(o, tuple(f)) for o, f in others.values()))
    return conflicts


def _expiry(value: Any, long_term: bool | None) -> str | None:
    if long_term:
        return "long-term"
    return value.isoformat() if isinstance(value, date) else value


def _latest_per_document(table: pa.Table) -> pa.Table:
    """The latest row of each document, in Arrow: sorted by document and time, each document's last row kept."""
    table = table.sort_by([("sha256", "ascending"), ("page", "ascending"), ("processed_at", "ascending")])
    if table.num_rows < 2:
        return table
    sha, page, n = table["sha256"].combine_chunks(), table["page"].combine_chunks(), table.num_rows
    last = pc.or_(pc.not_equal(sha.slice(0, n - 1), sha.slice(1)), pc.not_equal(page.slice(0, n - 1), page.slice(1)))
    return table.filter(pa.concat_arrays([last, pa.array([True])]))


def _group_keys(doc_type: pa.ChunkedArray | pa.Array, number: pa.ChunkedArray | pa.Array) -> pa.Array:
    cleaned = pc.utf8_upper(pc.replace_substring_regex(number, pattern=r"\s+", replacement=""))
    return pc.binary_join_element_wise(pc.fill_null(doc_type, ""), cleaned, _SEP)


def _person_readings(out_dir: Path) -> dict[str, Reading | None]:
    """Each document a person decided on -> its values (None: no number, or declared unreadable)."""
    readings: dict[str, Reading | None] = {}
    for key, c in latest_corrections(out_dir).items():
        number = c["id_number_after"]
        if c["decision"] == "cannot be read" or not number:
            readings[key] = None
            continue
        expiry = c["expiry_date_after"]
        readings[key] = Reading(key=key, source_path=c["source_path"], run_id=c["run_id"],
                                doc_type=c["doc_type_after"], id_number=comparable_number(number),
                                name=c["name_after"], expiry=expiry, by_person=True)
    return readings


def _machine_readings(out_dir: Path, also: Collection[str]) -> list[Reading]:
    """The latest machine result of each document whose (type, number) is on more than one document, or in
    `also` (groups people's decisions hold)."""
    table = read_table(out_dir, RESULTS, _COLUMNS)
    if table is None:
        return []
    table = _latest_per_document(table)
    table = table.filter(pc.is_valid(table["id_number"]))
    if table.num_rows == 0:
        return []
    groups = _group_keys(table["doc_type"], table["id_number"])
    counts = pc.value_counts(groups)
    shared = counts.field("values").filter(pc.greater(counts.field("counts"), 1))
    wanted = pa.concat_arrays([shared, pa.array(sorted(set(also)), pa.string())])
    rows = table.filter(pc.is_in(groups, value_set=wanted)).to_pylist()
    return [Reading(key=f"{r['sha256']}:{r['page']}", source_path=r["source_path"], run_id=r["run_id"], doc_type=r["doc_type"],
                    id_number=comparable_number(r["id_number"]), name=r["name"],
                    expiry=_expiry(r["expiry_date"], r["expiry_long_term"]), by_person=False) for r in rows]


def find_conflicts(out_dir: Path) -> dict[str, Conflict]:
    """`sha256:page` -> the conflict of each machine record of OUT that is flagged (see the module docstring)."""
    people = _person_readings(out_dir)
    decided = [r for r in people.values() if r is not None]
    machine = [r for r in _machine_readings(out_dir, {r.group for r in decided}) if r.key not in people]
    by_group: dict[str, list[Reading]] = defaultdict(list)
    for reading in (*machine, *decided):
        by_group[reading.group].append(reading)
    conflicts: dict[str, Conflict] = {}
    for readings in by_group.values():
        conflicts.update(group_conflicts(readings))
    return conflicts


def run_conflicts(out_dir: Path, run_ids: Iterable[str]) -> dict[str, Any]:
    """What the run summary records: how many of the runs' records are flagged, how many records of other runs
    are flagged because of them, and their numbers masked (the first `SUMMARY_NUMBERS`)."""
    return own_conflicts(out_dir, run_ids)[0]


def own_conflicts(out_dir: Path, run_ids: Iterable[str]) -> tuple[dict[str, Any], set[str]]:
    """`run_conflicts`, and the keys (`sha256:page`) of the runs' flagged records."""
    runs = set(run_ids)
    conflicts = find_conflicts(out_dir)
    own = [c for c in conflicts.values() if c.reading.run_id in runs]
    earlier = {d.other.key for c in own for d in c.disagreements
               if d.other.key in conflicts and d.other.run_id not in runs}
    numbers = sorted({mask_id(c.reading.id_number) or "" for c in own})
    return ({"records": len(own), "other_records": len(earlier), "numbers": numbers[:SUMMARY_NUMBERS]},
            {c.reading.key for c in own})


NO_CONFLICTS: dict[str, Any] = {"records": 0, "other_records": 0, "numbers": []}
