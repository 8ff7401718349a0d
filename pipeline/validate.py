"""Validation: JSON Schema first, then the checks a schema cannot express (checksums, real dates).

Every backend's output goes through here, so a VLM answer and an OCR reading are held to the same rules and
a record that fails names the check that failed instead of quietly carrying a wrong value into Parquet.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import date
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from pipeline.datamodel import FIELD_NAMES, Extraction, Failure, FieldReading, PreparedImage, Reason, Record
from pipeline.formats.names import looks_like_name
from pipeline.formats.registered import FORMATS, NumberCheck
from pipeline.settings import SCHEMA_PATH


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _validator() -> Draft202012Validator:
    Draft202012Validator.check_schema(schema())
    return Draft202012Validator(schema())


def schema_errors(fields: dict[str, Any]) -> list[str]:
    """Readable JSON Schema violations, e.g. `expiry_date: '2030/01/01' is not valid under any ...`."""
    errors = sorted(_validator().iter_errors(fields), key=lambda e: list(e.absolute_path))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]


def semantic_problems(fields: dict[str, Any]) -> list[tuple[Reason, str]]:
    """Checks beyond the schema, on schema-valid fields. Each problem is (reason code, check name: detail)."""
    problems: list[tuple[Reason, str]] = []
    if all(fields.get(k) is None for k in FIELD_NAMES):
        problems.append((Reason.NO_FIELDS_FOUND, "no name, document number or expiry date on the page"))
    expiry = fields.get("expiry_date")
    if expiry == "long-term" and not FORMATS.valid_for_life(fields.get("doc_type")):  # 长期: only where the format says
        holders = " or ".join(dict.fromkeys(FORMATS.long_term().values()))
        problems.append((Reason.INVALID_DATE, f"date.expiry: 'long-term' is only {holders}'s validity, "
                                              f"not a {fields.get('doc_type')}'s"))
    elif isinstance(expiry, str) and expiry != "long-term":
        try:
            date.fromisoformat(expiry)
        except ValueError:
            problems.append((Reason.INVALID_DATE, f"date.expiry: {expiry!r} is not a calendar date"))
    refutation = number_refutation(fields)
    if refutation is not None:
        problems.append((Reason.CHECKSUM_FAILED, refutation))
    name = fields.get("name")
    if isinstance(name, str) and not looks_like_name(name, abbreviations=True):  # MRZ debris, a number: never stored
        problems.append((Reason.SCHEMA_VIOLATION, "name.shape: a name holds only letters, spaces, hyphens, "
                                                  "apostrophes and a period after an abbreviated word"))
    return problems


def field_errors(fields: dict[str, Any]) -> list[str]:
    """All problems with a field dict as readable strings; empty means valid. Used for VLM repair prompts."""
    errors = schema_errors(fields)
    if errors:
        return errors
    return [detail for _, detail in semantic_problems(fields)]


def passed_checks(fields: dict[str, Any]) -> list[str]:
    """Names of the checks a valid record passed, stored in the `checks` column."""
    checks = ["schema"]
    if isinstance(fields.get("expiry_date"), str) and fields["expiry_date"] != "long-term":
        checks.append("date.expiry")
    check = _number_check(fields)
    if check is not None:
        checks.append(check.name)
    return checks


def number_refutation(fields: dict[str, Any]) -> str | None:
    """`check name: what failed` when the document number fails the checksum it must pass, else None."""
    check = _failed_number_check(fields)
    return None if check is None else f"{check.name}: {check.failure}"


def _failed_number_check(fields: dict[str, Any]) -> NumberCheck | None:
    """The checksum the document number must pass, when it fails it."""
    check = _number_check(fields)
    return None if check is None or check.passes(fields["id_number"]) else check


def _number_check(fields: dict[str, Any]) -> NumberCheck | None:
    """The checksum the document number must pass: the one of its document type's format, or, on any other
    type, a format's check whose number shape it has (a model answer must not escape the PRC check by calling
    a resident ID card a passport or "unknown")."""
    number = fields.get("id_number")
    return FORMATS.number_check(fields.get("doc_type"), number) if isinstance(number, str) else None


def validate(extraction: Extraction, prepared: PreparedImage) -> Record | Failure:
    """Turn one backend extraction into a Record, or a validate-stage Failure naming the failed check.

    A check digit that fails proves one field misread and says nothing against the others, so that field is
    stored `unreadable` (the failed check stays in `check_failures`) and the record goes to review with the
    rest still read; only when nothing else was read does the page go to the failure queue (`checksum_failed`).
    """
    fields = extraction.fields

    def fail(reason: Reason, detail: str) -> Failure:
        return Failure.for_ref(extraction.ref, "validate", reason, detail, attempts=extraction.attempts,
                               raw_response=(extraction.raw_response or "")[:2000] or None,
                               backend=extraction.backend)

    errors = schema_errors(fields)
    if errors:
        return fail(Reason.SCHEMA_VIOLATION, "; ".join(errors)[:1000])
    refuted = refuted_fields(extraction)
    if refuted and all(fields.get(k) is None or k in refuted for k in FIELD_NAMES):
        why = number_refutation(fields)
        return fail(Reason.CHECKSUM_FAILED, "failed: " + ", ".join(dict.fromkeys(refuted.values()))
                    + (f" ({why})" if why else ""))
    extraction = without_fields(extraction, refuted)
    fields = extraction.fields
    problems = semantic_problems(fields)
    if problems:
        reason, detail = problems[0]
        return fail(reason, "; ".join(d for _, d in problems))
    expiry = fields["expiry_date"]
    return Record(
        extraction=extraction,
        prepared=prepared,
        checks=sorted(set(passed_checks(fields)) | set(extraction.checks)),
        expiry_date=None if expiry in (None, "long-term") else expiry,
        expiry_long_term=expiry == "long-term",
    )


def refuted_fields(extraction: Extraction) -> dict[str, str]:
    """Stored field -> the failed check that proves it misread: a backend's check digit (the formats'
    `refuting_checks`; the others, such as the birth date or composite digit and the printed-vs-MRZ
    cross-checks, only lower confidence and stay in `check_failures`), or the checksum the document number
    must pass (a model's answer is held to it as an OCR reading is)."""
    fields, refuting = extraction.fields, FORMATS.refuting_checks()
    refuted = {field: check for check in extraction.check_failures
               if (field := refuting.get(check)) is not None and fields.get(field) is not None}
    if "id_number" not in refuted and (check := _failed_number_check(fields)) is not None:
        refuted["id_number"] = check.name
    return refuted


def without_fields(extraction: Extraction, refuted: dict[str, str]) -> Extraction:
    """The extraction with each refuted field unreadable (no value, confidence 0, no evidence class) and its
    failed check in `check_failures`."""
    if not refuted:
        return extraction
    return dataclasses.replace(
        extraction,
        fields={**extraction.fields, **dict.fromkeys(refuted)},
        field_states={**extraction.field_states, **{k: FieldReading(None, "unreadable", 0.0) for k in refuted}},
        check_failures=list(dict.fromkeys([*extraction.check_failures, *refuted.values()])),
        evidence={k: v for k, v in extraction.evidence.items() if k not in refuted},
    )
