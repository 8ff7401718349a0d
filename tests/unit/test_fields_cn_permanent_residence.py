"""PRC Foreign Permanent Resident ID Card: 2017 (15-character) and 2023 (18-character) numbers built here
from the published layouts, OCR repair, and whole-page readings."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.document import read_document
from pipeline.formats import cn_permanent_residence as pr
from tests.unit.test_fields_document import page, states

TODAY = date(2026, 6, 1)

# Built here, check characters computed by hand:
# 2017: USA (nationality) 1101 (Beijing, accepting authority) 850815 (born 1985-08-15) 2 (sequence);
#       7-3-1 weights over "USA11018508152" (U=30, S=28, A=10) -> 6.
N2017 = "USA110185081526"
# 2023: 9 (foreigner) 11 (Beijing) 840 (USA, ISO 3166-1 numeric) 19850815 002; MOD 11-2 -> 3.
N2023 = "911840198508150023"
# 2023 with check character X: 9 31 (Shanghai) 156 19900101 009 -> weighted sum % 11 = 2 -> 'X'.
N2023_X = "93115619900101009X"


def test_numbers_built_from_the_layouts() -> None:
    for number, born in ((N2017, date(1985, 8, 15)), (N2023, date(1985, 8, 15)), (N2023_X, date(1990, 1, 1))):
        assert pr.is_valid_number(number, today=TODAY), number
        assert pr.birth_date(number, today=TODAY) == born
    assert pr.is_valid_number(N2023_X.lower(), today=TODAY)


@pytest.mark.parametrize("number", [
    N2017[:-1] + "7",                 # wrong check digit
    "USA9901850815" + N2017[-2:],     # province 99 does not exist
    "USA1101851315" + "2" + "6",      # month 13
    N2023[:-1] + "4",                 # wrong MOD 11-2 character
    "1" + N2023[1:],                  # resident-ID shape, not a foreigner's number
    "911840" + "20300101" + "0023",   # born in the future
    "US110185081526",                 # 14 characters
    "1SA110185081526",                # nationality must be letters
])
def test_invalid_numbers(number: str) -> None:
    assert not pr.is_valid_number(number, today=TODAY)


def test_check_characters_follow_the_resident_id_rule() -> None:
    from pipeline.formats import cn_id, mrz

    assert cn_id.check_char(N2023[:17]) == N2023[17] and cn_id.check_char(N2023_X[:17]) == "X"
    assert mrz.check_digit(N2017[:14]) == int(N2017[14])


def test_normalise_number_repairs_only_when_the_check_passes() -> None:
    assert pr.normalise_number("Card No. U5A 1101 85O8 152 6", today=TODAY) == N2017
    assert pr.normalise_number("证件号码 9118 4019 85O8 1500 23", today=TODAY) == N2023
    assert pr.normalise_number("93115619900101009x", today=TODAY) == N2023_X
    assert pr.normalise_number("U5A110185O81527", today=TODAY) is None  # repaired, but the digit fails
    assert pr.normalise_number("no number here", today=TODAY) is None


# ---------------------------------------------------------------------------------- whole page

def card(number: str) -> list[str]:
    return ["中华人民共和国外国人永久居留身份证", "FOREIGN PERMANENT RESIDENT ID CARD", "姓名/Name", "SMITH, JOHN",
            "性别/Sex 男/M", "出生日期/Date of Birth 1985.08.15", "国籍/Nationality 美国/USA",
            "有效期限/Period of Validity 2017.06.15-2027.06.14", f"证件号码/Card No. {number}"]


@pytest.mark.parametrize("number", [N2017, N2023])
def test_card_page(number: str) -> None:
    r = read_document(page(*card(number)), TODAY)
    assert r.doc_type == "cn_permanent_residence"
    assert r.fields == {"name": "SMITH JOHN", "id_number": number, "expiry_date": "2027-06-14"}
    assert set(states(r).values()) == {"present"}
    assert {"cn_pr.checksum", "cn_pr.birth_matches_printed", "cn_pr.validity_range"} <= set(r.checks)


def test_card_page_with_bad_number_or_other_birth_date() -> None:
    r = read_document(page(*card(N2017[:-1] + "7")), TODAY)
    assert r.doc_type == "cn_permanent_residence"
    assert r.fields["id_number"] is None and states(r)["id_number"] == "unreadable"
    lines = [x.replace("1985.08.15", "1985.08.16") for x in card(N2023)]
    r = read_document(page(*lines), TODAY)
    assert "cn_pr.birth_matches_printed" in r.check_failures and r.states["id_number"].confidence <= 0.5
