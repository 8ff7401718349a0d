"""PRC resident ID numbers and card-side parsing (the upstream vectors: tests/realdata/)."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.dates import parse_validity
from pipeline.formats import cn_id

TODAY = date(2026, 6, 1)


def test_future_birth_and_bad_dates_are_invalid() -> None:
    number = "11010120300101001"  # born 2030
    assert not cn_id.is_valid_number(number + cn_id.check_char(number), today=TODAY)
    assert cn_id.is_valid_number(number + cn_id.check_char(number), today=date(2031, 1, 1))
    bad = "11010119990230001"  # 30 Feb
    assert not cn_id.is_valid_number(bad + cn_id.check_char(bad), today=TODAY)


def test_normalise_number_repairs_ocr_only_when_checksum_passes() -> None:
    assert cn_id.normalise_number("5137O1 1995O7l76346", today=TODAY) == "513701199507176346"
    assert cn_id.normalise_number("44011320141005001x", today=TODAY) == "44011320141005001X"
    assert cn_id.normalise_number("公民身份号码 513701199507176345", today=TODAY) is None  # bad checksum
    assert cn_id.normalise_number("no number here", today=TODAY) is None


# ------------------------------------------------------------------------------------- card sides

FRONT = ["姓名张三", "性别男", "民族汉", "出生 1995 年 7 月 17 日", "住址四川省成都市武侯区益州",
         "公民身份号码", "110101199507171234"]


def _number(prefix: str, sex_digit: int) -> str:
    first17 = prefix[:16] + str(sex_digit)
    return first17 + cn_id.check_char(first17)


def test_parse_front_glued_labels_and_cross_checks() -> None:
    number = _number("1101011995071712", 3)  # odd: male
    front = cn_id.parse_front([*FRONT[:-1], number], today=TODAY)
    assert (front.name, front.sex, front.birth_date, front.number) == ("张三", "男", date(1995, 7, 17), number)
    assert front.checks == ["cn_id.checksum", "cn_id.birth_matches_printed", "cn_id.sex_matches_printed"]
    assert front.check_failures == []


def test_parse_front_label_on_its_own_line_and_mismatches() -> None:
    number = _number("1101011996071712", 4)  # female, born 1996-07-17
    lines = ["姓名", "李四", "性 别 男", "出生1995年7月17日", "公民身份号码 " + number]
    front = cn_id.parse_front(lines, today=TODAY)
    assert front.name == "李四" and front.number == number
    assert set(front.check_failures) == {"cn_id.birth_matches_printed", "cn_id.sex_matches_printed"}


def test_parse_front_without_number_invents_nothing() -> None:
    front = cn_id.parse_front(["姓名张三", "公民身份号码", "5137011995071763"], today=TODAY)
    assert front.name == "张三" and front.number is None and front.checks == []


@pytest.mark.parametrize(("text", "expected"), [
    ("有效期限 2010.01.01-2020.12.12", (date(2010, 1, 1), date(2020, 12, 12))),
    ("有效期限2015.03.01至2035.03.01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015.03.01—2035.03.01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015.03.01–2035.03.01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015.03.01~2035.03.01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015. 03. 01 - 2035 .03. 01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015,03,01-2035,03,01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("2015-03-01-2035-03-01", (date(2015, 3, 1), date(2035, 3, 1))),
    ("20150301一20350301", (date(2015, 3, 1), date(2035, 3, 1))),
    ("２０１５．０３．０１－长期", (date(2015, 3, 1), "long-term")),
    ("有效期限 2001.05.06-长期", (date(2001, 5, 6), "long-term")),
    ("有效期限 2001.05.06至长期", (date(2001, 5, 6), "long-term")),
    ("2023.02.30-2033.02.28", None),  # no such day
    ("2035.03.01-2015.03.01", None),  # end before start: a misread
    ("2035.03.01", None),             # a lone date is not a range
    ("长期", None),
    # motion blur: the dash read as a CJK character, taken only between two full dates
    ("20250221年20350221", (date(2025, 2, 21), date(2035, 2, 21))),
    ("有基期限 2025.02.21年2035.02.21", (date(2025, 2, 21), date(2035, 2, 21))),
    ("2015.03.01年长期", (date(2015, 3, 1), "long-term")),
    ("有效期限2035.02.21", None),  # the label's last character is no dash: still a lone date
    # a blurred dot read as the ideographic comma or full stop (hard tuning seed 404)
    ("有效期限 2024.08.13—2044.08、13", (date(2024, 8, 13), date(2044, 8, 13))),
    ("2024。08.13-长期", (date(2024, 8, 13), "long-term")),
    ("出生1999年09月09日", None),
])
def test_parse_validity(text: str, expected: object) -> None:
    assert parse_validity(text) == expected


def test_parse_back() -> None:
    back = cn_id.parse_back(["中华人民共和国", "居民身份证", "签发机关 四川省成都市锦江分局", "有效期限", "2010.01.01-2020.12.12"])
    assert (back.valid_from, back.valid_until, back.authority) == (date(2010, 1, 1), date(2020, 12, 12),
                                                                     "四川省成都市锦江分局")
    long_term = cn_id.parse_back(["签发机关", "北京市公安局东城分局", "有效期限 2005.01.01—长期"])
    assert long_term.valid_until == "long-term" and long_term.authority == "北京市公安局东城分局"
    assert not cn_id.parse_back(["中华人民共和国", "居民身份证"]).found


def test_id_number_is_not_a_validity_range() -> None:
    """Regression: the 8-digit runs inside an ID number once parsed as `1101-01-19 - 9003-07-12`."""
    from pipeline.formats.dates import parse_validity

    assert parse_validity("公民身份号码110101199003071233") is None
    assert parse_validity("110101199003071233") is None
    assert parse_validity("有效期限 2019.04.10-2099.04.10") is None  # an 80-year span is a misread


@pytest.mark.parametrize("lines", [["姓名☑张三"], ["姓名|张三"], ["姓名 ☐", "张三"], ["姓名:", "》张三"]])
def test_parse_front_name_drops_symbols_read_between_label_and_value(lines: list[str]) -> None:
    assert cn_id.parse_front(lines, today=TODAY).name == "张三"


@pytest.mark.parametrize(("value_line", "name"), [("名胡婷", "胡婷"), ("姓名 胡婷", "胡婷"), ("胡婷", "胡婷"),
                                                  ("名胡", "名胡")])  # two characters: nothing to strip
def test_parse_front_name_drops_the_label_tail_its_box_repeats(value_line: str, name: str) -> None:
    assert cn_id.parse_front(["姓名", value_line, "性别"], today=TODAY).name == name


def test_parse_front_name_with_letters_or_digits_is_not_repaired() -> None:
    assert cn_id.parse_front(["姓名☑张3"], today=TODAY).name is None


@pytest.mark.parametrize(("lines", "name"), [
    (["姓者 杨洋", "性别女民族汉"], "杨洋"),              # 名 misread under motion blur: the space ends the label
    (["娃名 杨洋"], "杨洋"),                             # 姓 misread
    (["姓名 张三", "姓者 杨洋"], "张三"),                  # an exact label wins
    (["姓者杨洋"], None),                                # no space, no 性别 under it: nothing shows it is the name
    (["姓者罗英", "性别", "男"], "罗英"),                  # glued, right above 性别: the label's two characters
    (["娃名罗英华", "性别男"], "罗英华"),
    (["姓罗英", "性别男"], None),                          # the label lost a character: one is left, no name
    (["姓者 杨洋2"], None), (["住址 北京"], None), (["民族 汉"], None),
    (["姓者", "胡玉俊", "性别", "男"], "胡玉俊"),          # the label alone, the value between it and 性别
    (["姓者", "朱鹏", "性别男"], "朱鹏"),
    (["姓者", "朱鹏"], None),                            # nothing shows the next box is the name
    (["张名", "性别男", "民族汉"], None),                  # a name ending in 名, label lost: not a label
    (["姓者", "性别", "性别男"], None),                    # a label is not a name
])
def test_parse_front_name_after_a_label_with_one_character_misread(lines: list[str], name: str | None) -> None:
    assert cn_id.parse_front(lines, today=TODAY).name == name
