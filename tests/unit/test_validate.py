"""Validation: JSON Schema plus checksums and real dates; failures name the failed check."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.datamodel import (
    FIELD_NAMES,
    DocumentRef,
    Extraction,
    Failure,
    FieldReading,
    PreparedImage,
    Reason,
    Record,
)
from pipeline.validate import field_errors, semantic_problems, validate

REF = DocumentRef(path=Path("x.png"), rel_path="x.png", sha256="0" * 64)
PREPARED = PreparedImage(ref=REF, pixels=np.zeros((32, 64, 3), np.uint8), original_size=(64, 32),
                         sent_size=(64, 32), rotation_applied=0, skew_corrected=0.0, orientation="landscape",
                         visual_tokens=2)
VALID_CN = {"doc_type": "cn_id", "name": "张伟", "id_number": "11010519491231002X", "expiry_date": None,
            "orientation": "landscape"}


def _present(fields: dict) -> dict[str, FieldReading]:
    return {k: FieldReading(v, "present", 0.99) for k, v in fields.items() if k in FIELD_NAMES and v is not None}


def _validate(fields: dict, **kw) -> Record | Failure:
    return validate(Extraction(ref=REF, fields=fields, backend="t", model="m", **kw), PREPARED)


def test_valid_record_lists_checks() -> None:
    record = _validate(VALID_CN)
    assert isinstance(record, Record)
    assert {"schema", "cn_id.checksum"} <= set(record.checks)
    assert record.expiry_date is None and record.expiry_long_term is False


def test_long_term_expiry() -> None:
    record = _validate({**VALID_CN, "name": None, "id_number": None, "expiry_date": "long-term"})
    assert isinstance(record, Record) and record.expiry_long_term and record.expiry_date is None


@pytest.mark.parametrize("doc_type", ["passport", "visa", "id_card", "cn_permanent_residence", "unknown"])
def test_long_term_is_only_a_resident_id_cards_validity(doc_type: str) -> None:
    """长期 exists on PRC resident ID cards only: a model's or a person's 'long-term' passport is refused."""
    failure = _validate({**VALID_CN, "doc_type": doc_type, "id_number": None, "expiry_date": "long-term"})
    assert isinstance(failure, Failure) and failure.reason == Reason.INVALID_DATE and "long-term" in failure.detail


def test_missing_key_is_schema_violation() -> None:
    fields = dict(VALID_CN)
    del fields["expiry_date"]
    failure = _validate(fields)
    assert isinstance(failure, Failure)
    assert (failure.stage, failure.reason) == ("validate", Reason.SCHEMA_VIOLATION)
    assert "expiry_date" in failure.detail


def test_a_number_failing_its_checksum_is_unreadable_and_the_rest_stands() -> None:
    """The check character proves the number misread and says nothing against the name: the record is stored with
    the number unreadable (so it goes to review) and the failed check named."""
    record = _validate({**VALID_CN, "id_number": "110105194912310021"}, field_states=_present(VALID_CN))
    assert isinstance(record, Record)
    assert record.extraction.fields["id_number"] is None and record.extraction.fields["name"] == "张伟"
    assert record.extraction.field_states["id_number"] == FieldReading(None, "unreadable", 0.0)
    assert record.extraction.field_states["name"].state == "present"
    assert "cn_id.checksum" in record.extraction.check_failures and "cn_id.checksum" not in record.checks


def test_a_page_whose_only_field_fails_its_checksum_is_a_failure() -> None:
    failure = _validate({**VALID_CN, "name": None, "id_number": "110105194912310021"})
    assert isinstance(failure, Failure) and failure.reason is Reason.CHECKSUM_FAILED
    assert "cn_id.checksum" in failure.detail and "MOD 11-2" in failure.detail  # what failed, not only its name


@pytest.mark.parametrize("doc_type", ["unknown", "passport", "id_card", "driving_licence"])
def test_a_resident_id_shaped_number_is_checked_whatever_type_the_answer_claims(doc_type: str) -> None:
    # A model must not get an unchecked PRC number stored by calling the card something else.
    refuted = _validate({**VALID_CN, "doc_type": doc_type, "id_number": "110105194912310021"})
    assert isinstance(refuted, Record) and refuted.extraction.fields["id_number"] is None
    assert "prc_number.checksum" in refuted.extraction.check_failures
    failure = _validate({**VALID_CN, "doc_type": doc_type, "name": None, "id_number": "110105194912310021"})
    assert isinstance(failure, Failure) and failure.reason is Reason.CHECKSUM_FAILED
    assert "prc_number.checksum" in failure.detail
    record = _validate({**VALID_CN, "doc_type": doc_type})
    assert isinstance(record, Record) and "prc_number.checksum" in record.checks
    passport = _validate({**VALID_CN, "doc_type": doc_type, "name": "ZHANG WEI", "id_number": "E12345678"})
    assert isinstance(passport, Record) and not any(c.endswith(".checksum") for c in passport.checks)


def test_impossible_date() -> None:
    failure = _validate({**VALID_CN, "expiry_date": "2031-02-30"})
    assert isinstance(failure, Failure) and failure.reason is Reason.INVALID_DATE


def test_nothing_found() -> None:
    failure = _validate({"doc_type": "unknown", "name": None, "id_number": None, "expiry_date": None,
                         "orientation": "portrait"})
    assert isinstance(failure, Failure) and failure.reason is Reason.NO_FIELDS_FOUND


def test_a_backend_check_digit_failure_makes_its_field_unreadable_but_a_cross_check_only_lowers_trust() -> None:
    passport = {"doc_type": "passport", "name": "MARTIN SARAH", "id_number": "ZE000509",
                "expiry_date": "2023-01-14", "orientation": "landscape"}
    states = _present(passport)
    for check, field in (("mrz.number", "id_number"), ("mrz.expiry", "expiry_date")):
        record = _validate(passport, check_failures=[check], field_states=states,
                           evidence={k: f"{k}/mrz" for k in states})
        assert isinstance(record, Record), check
        ex = record.extraction
        assert ex.fields[field] is None and ex.field_states[field].state == "unreadable", check
        assert field not in ex.evidence and ex.check_failures == [check]
        assert all(ex.fields[k] == passport[k] and ex.field_states[k].state == "present" for k in states if k != field)
    assert _validate(passport, check_failures=["mrz.expiry"]).expiry_date is None  # type: ignore[union-attr]
    only_number = {**passport, "name": None, "expiry_date": None}
    failure = _validate(only_number, check_failures=["mrz.number"])
    assert isinstance(failure, Failure) and failure.reason is Reason.CHECKSUM_FAILED and "mrz.number" in failure.detail
    for warning in ("cross.name_mrz_vs_viz", "mrz.birth", "cn_id.sex_matches_printed"):
        record = _validate(passport, check_failures=[warning], field_states=states)
        assert isinstance(record, Record) and record.extraction.fields == passport, warning


def test_field_errors_for_repair_prompts() -> None:
    assert field_errors(VALID_CN) == []
    errors = field_errors({**VALID_CN, "expiry_date": "2030/01/01"})
    assert errors and errors[0].startswith("expiry_date")


def test_a_name_that_is_not_a_name_is_refused_whatever_the_backend() -> None:
    """MRZ debris or digits in a VLM's name: a schema violation (the repair turn quotes it), never stored."""
    for name in ("SG3GI9DECZOOSIOJANZO34", "JOHN2 SMITH", "<<SMITH", ".JOHN", "J..OHN SMITH", "SMITH 2. JOHN"):
        problems = semantic_problems({"doc_type": "passport", "name": name, "id_number": None,
                                      "expiry_date": None, "orientation": "landscape"})
        assert [(r, d.split(":")[0]) for r, d in problems] == [(Reason.SCHEMA_VIOLATION, "name.shape")], name
    # abbreviated words as printed and typed (the OCR readers keep periods out: `looks_like_name` by default)
    for name in ("O'NEILL MARY-JANE", "张伟", "ERIKSSON ANNA MARIA", "ST. JOHN MARY", "GARCIA MA. CRISTINA",
                 "SMITH JOHN JR.", "ST.JOHN MARY"):
        assert semantic_problems({"doc_type": "passport", "name": name, "id_number": None, "expiry_date": None,
                                  "orientation": "landscape"}) == [], name


def test_a_zone_reading_whose_number_fails_its_digit_is_stored_without_the_number() -> None:
    """End to end from OCR lines: the name the page prints and the expiry its own digit proves are stored, the
    number the failed digit refutes is unreadable."""
    from pipeline.formats.document import read_document
    from tests.unit.test_fields_document import TD3, TODAY, page

    zone = [TD3[0], TD3[1].replace("L898902C36", "L898902C31")]
    r = read_document(page("Surname", "ERIKSSON", "Given names", "ANNA MARIA", *zone), TODAY)
    record = _validate({"doc_type": r.doc_type, **r.fields, "orientation": "landscape"}, field_states=r.states,
                       checks=r.checks, check_failures=r.check_failures)
    assert isinstance(record, Record)
    assert record.extraction.fields == {"doc_type": "passport", "name": "ERIKSSON ANNA MARIA", "id_number": None,
                                        "expiry_date": "2012-04-15", "orientation": "landscape"}
    assert record.extraction.field_states["id_number"].state == "unreadable"
