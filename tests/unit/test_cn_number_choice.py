"""Choosing the PRC number from re-read texts of its line (pipeline/extract/ocr/cn_number_reread.py): only one
checksum-valid number that agrees with the printed 出生 / 性别 is taken; none or several leave it unreadable."""

from __future__ import annotations

from datetime import date

from pipeline.extract.ocr import cn_number_reread as C
from pipeline.formats import cn_id

TODAY = date(2026, 11, 30)


def _number(first17: str) -> str:
    return first17 + cn_id.check_char(first17)


A = _number("11010519491231002")  # born 1949-12-31, sequence digit 2: 女
B = _number("44030119900101123")  # born 1990-01-01, sequence digit 3: 男


def _misread(number: str, at: int) -> str:
    """`number` with one digit changed so that its check character no longer fits."""
    for d in "0123456789":
        changed = number[:at] + d + number[at + 1:]
        if changed != number and not cn_id.is_valid_number(changed, today=TODAY):
            return changed
    raise AssertionError("every digit passes")


def test_one_valid_reading_among_failing_ones_is_chosen():
    texts = [_misread(A, 9), A, "公民身份号码" + A, _misread(A, 3)]
    assert C.choose(texts, TODAY) == A


def test_ocr_repairs_count_as_the_same_number():
    assert C.choose([A.replace("0", "O"), A], TODAY) == A


def test_two_distinct_valid_readings_leave_it_unreadable():
    assert C.choose([A, B], TODAY) is None


def test_no_valid_reading_leaves_it_unreadable():
    assert C.choose([_misread(A, 5), A[:17], ""], TODAY) is None


def test_a_number_disagreeing_with_the_printed_birth_date_or_sex_is_not_taken():
    assert C.choose([A], TODAY, printed_birth=date(1949, 12, 31), printed_sex="女") == A
    assert C.choose([A], TODAY, printed_birth=date(1950, 12, 31)) is None
    assert C.choose([A], TODAY, printed_sex="男") is None


def test_every_valid_window_of_a_long_text_is_a_candidate():
    assert C.valid_numbers(A + B, TODAY) == {A, B}


def test_number_shaped_boxes():
    assert C._is_number_shaped(A)
    assert C._is_number_shaped(_misread(A, 4)[:14])
    assert not C._is_number_shaped("公民身份号码")
    assert not C._is_number_shaped("出生1990年1月1日")
