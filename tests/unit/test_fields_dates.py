"""Printed visual-zone dates, including the OCR digit-for-letter slips in month names."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.dates import parse_printed_dates

TODAY = date(2026, 6, 1)


@pytest.mark.parametrize(("text", "expected"), [
    ("12 OCT 2031", [date(2031, 10, 12)]),
    ("12 0CT 2031", [date(2031, 10, 12)]),   # O read as zero
    ("21 5EP 2005", [date(2005, 9, 21)]),    # S read as five
    ("3 FE8 2030", [date(2030, 2, 3)]),      # B read as eight
    ("15 APR/AVR 12", [date(2012, 4, 15)]),
    ("20MAR2006", [date(2006, 3, 20)]),
    ("14.08.1994", [date(1994, 8, 14)]),
    ("2019.06.01", [date(2019, 6, 1)]),
    ("02. 08. 2031.", [date(2031, 8, 2)]),   # a dot and a space (Croatian documents)
    ("12 081 2031", []),                     # one letter is not a month
    ("31 FEB 2030", []),                     # impossible dates are dropped, not repaired
])
def test_printed_dates(text: str, expected: list[date]) -> None:
    assert parse_printed_dates(text, today=TODAY) == expected
