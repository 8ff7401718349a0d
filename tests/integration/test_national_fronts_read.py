"""Card fronts without a zone on their side (`synth.render_national`), read end to end by the real OCR models:
the French card of 2021, the German Personalausweis, the Croatian and the Czech cards and the US passport card give
the name (surname and given names) and the expiry date, and the number in the issuer's shape or none, below the
auto-accept threshold (no check vouches for them); the UK driving licence gives its numbered fields."""

from __future__ import annotations

import random
from datetime import date

import numpy as np
import pytest

from pipeline.extract.ocr.backend import read_page
from pipeline.ops.evaluation import normalise
from synth.render_national import render_national

TODAY = date(2026, 12, 4)


@pytest.mark.parametrize("kind", ["fr_front", "de_front", "hr_front", "cz_front", "us_passport_card"])
def test_a_card_front_is_read_by_its_labels(kind: str) -> None:
    rendered, _ = render_national(kind, random.Random(f"integration:{kind}"))
    reading, _ = read_page(np.asarray(rendered.image.convert("RGB")), TODAY, try_flipped=False)
    assert (reading.format, reading.doc_type) == ("national_front", "id_card")
    assert normalise("name", reading.fields["name"]) == normalise("name", rendered.name)
    assert reading.fields["expiry_date"] == rendered.expiry_date
    # a number OCR misreads (a 0 read as O) loses the issuer's shape: unreadable, never another number
    assert reading.fields["id_number"] in (rendered.id_number, None)
    if reading.fields["id_number"] is None:
        assert reading.states["id_number"].state == "unreadable"
    assert all(state.confidence < 0.95 for state in reading.states.values())


@pytest.mark.parametrize(("kind", "fmt", "doc_type", "check"), [
    # no labels: fields 1 and 2 give the name, 4b the expiry, 5 the number without the issue number after it,
    # which spells the surname, the initials and the birth date of field 3
    ("uk_licence_front", "licence_front", "driving_licence", "printed.issuer_front"),
    # the 2023 card has no zone: the Latin name after 姓名/Name (its comma dropped), the validity period's end,
    # and the 18-character number, stored only when its MOD 11-2 character and embedded birth date hold
    ("cn_pr_front", "cn_permanent_residence", "cn_permanent_residence", "cn_pr.checksum"),
])
def test_a_front_whose_number_its_own_fields_vouch_for_is_read_whole(kind: str, fmt: str, doc_type: str,
                                                                      check: str) -> None:
    rendered, _ = render_national(kind, random.Random(f"integration:{kind}"))
    reading, _ = read_page(np.asarray(rendered.image.convert("RGB")), TODAY, try_flipped=False)
    assert (reading.format, reading.doc_type) == (fmt, doc_type)
    assert reading.fields == {"name": rendered.name, "id_number": rendered.id_number,
                              "expiry_date": rendered.expiry_date}
    assert check in reading.checks


def test_both_sides_of_the_1988_french_card_give_an_expiry_its_issue_date_vouches_for() -> None:
    """The 1988-2021 card copied front and back: the zone gives name and number (check digits), the back the
    expiry, which its issue date and the number's YYMM vouch for (`cross.expiry_printed_span`)."""
    from pipeline.trust.table import evidence_class

    rendered, _ = render_national("fr_cni_1988", random.Random("integration:fr_cni_1988"))
    reading, _ = read_page(np.asarray(rendered.image.convert("RGB")), TODAY, try_flipped=False)
    assert (reading.format, reading.doc_type) == ("french_id_1988", "id_card")
    assert normalise("name", reading.fields["name"]) == normalise("name", rendered.name)
    assert (reading.fields["id_number"], reading.fields["expiry_date"]) == (rendered.id_number, rendered.expiry_date)
    assert evidence_class("expiry_date", reading.doc_type, reading.checks, reading.check_failures) == \
        "expiry_date/mrz.expiry_printed_span"



def test_a_1988_french_back_whose_issue_date_is_under_a_stamp_gives_an_expiry_nothing_vouches_for() -> None:
    """The tuning kind `fr_cni_1988_stamped`: the printed expiry is read, the issue date that would vouch for it
    is not, so its class is `mrz.expiry_none` (the class real backs with a struck stamp fall into)."""
    from pipeline.trust.table import evidence_class

    rendered, _ = render_national("fr_cni_1988_stamped", random.Random("integration:fr_cni_1988_stamped"))
    reading, _ = read_page(np.asarray(rendered.image.convert("RGB")), TODAY, try_flipped=False)
    assert reading.format == "french_id_1988" and reading.fields["expiry_date"] == rendered.expiry_date
    assert evidence_class("expiry_date", reading.doc_type, reading.checks, reading.check_failures) == \
        "expiry_date/mrz.expiry_none"
