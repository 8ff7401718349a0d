"""Validation: JSON Schema first, then the checks a schema cannot express (checksums, real dates).

Every backend's output goes through here, so a VLM answer and an OCR reading are held to the same rules and
a record that fails names the check that failed instead of quietly carrying a wrong value into Parquet.
"""

from __future__ import annotations

import json
from datetime import date
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator

from pipeline.config import SCHEMA_PATH
from pipeline.datamodel import FIELD_NAMES, Extraction, Failure, PreparedImage, Reason, Record
from pipeline.fields.formats import FORMATS, NumberCheck
from pipeline.fields.names import looks_like_name


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
    check = _number_check(fields)
    if check is not None and not check.passes(fields["id_number"]):
        problems.append((Reason.CHECKSUM_FAILED, f"{check.name}: {check.failure}"))
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


def _number_check(fields: dict[str, Any]) -> NumberCheck | None:
    """The checksum the document number must pass: the one of its document type's format, or, on any other
    type, a format's check whose number shape it has (a model answer must not escape the PRC check by calling
    a resident ID card a passport or "unknown")."""
    number = fields.get("id_number")
    return FORMATS.number_check(fields.get("doc_type"), number) if isinstance(number, str) else None


# Backend checks whose failure means a stored field is wrong, as the registered formats declare them (`validate`
# asks the registry itself). Others (birth date digit, composite digit, printed-vs-MRZ and printed sex/birth
# cross-checks) only lower confidence and stay in `check_failures`.
FATAL_CHECKS: dict[str, Reason] = FORMATS.fatal_checks()


def validate(extraction: Extraction, prepared: PreparedImage) -> Record | Failure:
    """Turn one backend extraction into a Record, or a validate-stage Failure naming the failed check."""
    fields = extraction.fields

    def fail(reason: Reason, detail: str) -> Failure:
        return Failure.for_ref(extraction.ref, "validate", reason, detail, attempts=extraction.attempts,
                               raw_response=(extraction.raw_response or "")[:2000] or None,
                               backend=extraction.backend)

    errors = schema_errors(fields)
    if errors:
        return fail(Reason.SCHEMA_VIOLATION, "; ".join(errors)[:1000])
    problems = semantic_problems(fields)
    if problems:
        reason, detail = problems[0]
        return fail(reason, "; ".join(d for _, d in problems))
    fatal_checks = FORMATS.fatal_checks()
    fatal = [c for c in extraction.check_failures if c in fatal_checks]
    if fatal:
        return fail(fatal_checks[fatal[0]], "failed: " + ", ".join(fatal))
    expiry = fields["expiry_date"]
    return Record(
        extraction=extraction,
        prepared=prepared,
        checks=sorted(set(passed_checks(fields)) | set(extraction.checks)),
        expiry_date=None if expiry in (None, "long-term") else expiry,
        expiry_long_term=expiry == "long-term",
    )
