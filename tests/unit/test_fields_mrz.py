"""MRZ parsing and OCR-noise cases (the upstream test vectors in realdata/mrz_test_vectors: tests/realdata/)."""

from __future__ import annotations

from datetime import date

import pytest

from pipeline.formats.dates import yymmdd
from pipeline.formats import mrz

TODAY = date(2026, 6, 1)


# --------------------------------------------------------------------------------------- behaviour

TD3 = ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]


def test_result_shape_and_doc_type() -> None:
    r = mrz.parse(TD3, TODAY)
    assert r is not None and r.valid and r.doc_type == "passport"
    assert (r.name, r.number, r.birth_date, r.expiry_date) == ("ERIKSSON ANNA MARIA", "L898902C3",
                                                               date(1974, 8, 12), date(2012, 4, 15))
    assert r.checks_passed == ["mrz.number", "mrz.birth", "mrz.expiry", "mrz.personal", "mrz.composite"]
    visa = mrz.parse(["V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "L8988901C4XXX4009078F9612109<<<<<<<<"], TODAY)
    assert visa is not None and visa.format == "MRVB" and visa.doc_type == "visa"
    assert "mrz.composite" not in visa.checks_passed + visa.checks_failed


@pytest.mark.parametrize(("name_field", "name"), [
    ("ERIKSSON<<ANNA<MARIA", "ERIKSSON ANNA MARIA"),           # clean: not flagged
    ("ERIKSSON<<ANNA<MARIA<<<<<<C<C", "ERIKSSON ANNA MARIA"),   # fillers misread: debris dropped
    ("ERIKSSON<<ANNA<<MARIA", "ERIKSSON ANNA MARIA"),          # a lone '<' read twice: kept
])
def test_letters_after_the_closing_fillers_flag_the_name(name_field: str, name: str) -> None:
    r = mrz.parse([f"P<UTO{name_field:<<39}", TD3[1]], TODAY)
    assert r is not None and r.name == name and r.valid  # the check digits do not cover the name line
    assert r.name_debris == (name_field.count("<<") > 1)


@pytest.mark.parametrize(("expiry", "kept"), [("560415", True), ("620415", False), ("120231", False)])
def test_an_expiry_check_digit_does_not_vouch_for_a_date_no_document_carries(expiry: str, kept: bool) -> None:
    # 2062 is past the longest validity (today + 30 y); 31 February is no day. Either passes its check digit
    # here, as one misread digit in ten does, and is a failed check with no date, never a stored expiry.
    line = TD3[1][:21] + expiry + str(mrz.check_digit(expiry)) + TD3[1][28:]
    r = mrz.parse([TD3[0], line], TODAY)
    assert r is not None
    assert ("mrz.expiry" in r.checks_passed) is kept and ("mrz.expiry" in r.checks_failed) is not kept
    assert (r.expiry_date is not None) is kept


def test_parse_is_strict_and_find_repairs() -> None:
    damaged = [TD3[0], TD3[1].replace("L898902C3", "L8989O2C3")]
    strict = mrz.parse(damaged, TODAY)
    assert strict is not None and "mrz.number" in strict.checks_failed  # no silent correction
    repaired = mrz.find(damaged, TODAY)
    assert repaired is not None and repaired.number == "L898902C3" and repaired.valid


@pytest.mark.parametrize("lines", [
    [TD3[0].replace("<", "K"), TD3[1].replace("<", "K")],          # fillers read as K
    [TD3[0].replace("<", "«"), TD3[1]],                             # fillers read as «
    ["UTOPIA", TD3[0][:20], TD3[0][20:], TD3[1][:30] + " " + TD3[1][30:], "PASSPORT OFFICE"],  # split
    [TD3[0] + TD3[1]],                                              # joined
    [TD3[0].replace("O", "0"), TD3[1].replace("0", "O")],           # O/0 swapped everywhere
    [TD3[0].rstrip("<"), TD3[1]],                                   # trailing fillers dropped
    [TD3[0], TD3[1][:38] + TD3[1][39:]],                            # one filler dropped mid-line
])
def test_find_repairs_ocr_noise(lines: list[str]) -> None:
    r = mrz.find(lines, TODAY)
    assert r is not None and r.format == "TD3"
    assert r.number == "L898902C3" and r.expiry_date == date(2012, 4, 15)
    assert r.name in ("ERIKSSON ANNA MARIA", "ERIKSSON ANNAKMARIA")  # a lone '<' read as K is a letter


def test_find_does_not_invent_a_dropped_digit() -> None:
    # A lost birth-date digit cannot be restored: a filler where the zero was passes the check digits
    # ('<' weighs 0) but is not a date. The shifted line then holds one passing check only, too little.
    assert mrz.find([TD3[0], TD3[1][:15] + TD3[1][16:]], TODAY) is None


def test_find_ambiguous_number_is_not_guessed() -> None:
    # 'ID9875401' read as '109875401': several letter/digit readings pass the check digit equally
    # (two substitutions each), so the number is left as read and its check reported as failed.
    lines = ["IDLIE1098754015<<<<<<<<<<<<<<<", "8205122F1906224LIE<<<<<<<<<<<6", "OSPELT<BECK<<MARISA<<<<<<<<<<<"]
    r = mrz.find(lines, TODAY)
    assert r is not None and r.number == "109875401" and "mrz.number" in r.checks_failed


def test_find_prefers_number_printed_on_page() -> None:
    lines = ["P<JPNGAIMU<<SAKURA<<<<<<<<<<<<<<<<<<<<<<<<<<", "X512345673JPN7902206F1603202<<<<<<<<<<<<<<02"]
    assert mrz.find(lines, TODAY).number == "XS1234567"  # single minimal substitution
    assert mrz.find(["XS1234567", *lines], TODAY).number == "XS1234567"


def test_find_rejects_text_without_mrz() -> None:
    assert mrz.find(["PASSPORT", "SPECIMEN 12345678", "ABC<DEF 1234567890 XYZ"], TODAY) is None
    assert mrz.find([], TODAY) is None


def test_yymmdd_century_windows() -> None:
    today = date(2026, 6, 1)
    assert yymmdd("740812", kind="birth", today=today) == date(1974, 8, 12)
    assert yymmdd("250101", kind="birth", today=today) == date(2025, 1, 1)
    assert yymmdd("270101", kind="birth", today=today) == date(1927, 1, 1)  # birth cannot be future
    assert yymmdd("961210", kind="expiry", today=today) == date(1996, 12, 10)
    assert yymmdd("340528", kind="expiry", today=today) == date(2034, 5, 28)
    assert yymmdd("560531", kind="expiry", today=today) == date(2056, 5, 31)  # within today + 30 y
    assert yymmdd("760602", kind="expiry", today=today) == date(1976, 6, 2)  # within today - 50 y
    # Past today + 30 y (no document is valid so long) and before today - 50 y: a misread, not a date.
    assert yymmdd("600101", kind="expiry", today=today) is None
    assert yymmdd("760531", kind="expiry", today=today) is None
    assert yymmdd("000229", kind="birth", today=today) == date(2000, 2, 29)
    assert yymmdd("230230", kind="expiry", today=today) is None
    assert yymmdd("12O415", kind="expiry", today=today) is None


def test_find_td1_first_line_that_lost_its_fillers_behind_a_digit_line() -> None:
    # German ID card (evermeer specimen) as RapidOCR reads it: line 1 lost 7 trailing fillers, and a short
    # digit-rich line ("160 cm") above the zone must not be glued in front of it (that reading passed a
    # number check by chance and stored 'IDDT22D').
    lines = ["160 cm", "IDD<<T220001293<<<<<<<<", "6408125<2010315D<<<<<<<<<<<<<4", "MUSTERMANN<<ERIKA<<<<<<<"]
    r = mrz.find(lines, TODAY)
    assert r is not None and r.valid
    assert (r.number, r.name, r.expiry_date) == ("T22000129", "MUSTERMANN ERIKA", date(2020, 10, 31))


@pytest.mark.parametrize(("line1", "name"), [
    (TD3[0].replace("<", "Λ"), "ERIKSSON ANNA MARIA"),  # chevrons read as Greek capital lambda
    # the closing run read as A's swallows the final A; only the printed zone can give it back (fields.document)
    (TD3[0].replace("<<<<<<<<<<<<<<<<<<<", "AAAAAAAAAAAAAAAAAAA"), "ERIKSSON ANNA MARI"),
])
def test_find_reads_filler_lookalikes_in_the_name_line(line1: str, name: str) -> None:
    r = mrz.find([line1, TD3[1]], TODAY)
    assert r is not None and r.valid and not r.name_debris
    assert r.name == name


def test_a_number_the_check_digit_chose_is_marked_repaired() -> None:
    assert not mrz.find(TD3, TODAY).number_repaired
    repaired = mrz.find([TD3[0], TD3[1].replace("L898902C3", "L8989O2C3")], TODAY)
    assert repaired.number == "L898902C3" and repaired.valid and repaired.number_repaired


def test_a_printed_number_that_passes_the_zones_check_digit_is_the_number() -> None:
    """Motion blur: the zone reads ZD0910933 (8 as 0, 8 as 1: no confusion table allows either), the printed
    zone ZD8918933, which passes the zone's own check digit (a second, independent confirmation)."""
    td1 = ["I<UTOZD09109331<<<<<<<<<<<<<<<", "0509215M3503281UTO<<<<<<<<<<<4", "VAN<DER<BERG<<LUCAS<<<<<<<<<<<"]
    alone = mrz.find(td1, TODAY)
    assert alone is not None and alone.number != "ZD8918933"
    r = mrz.find(["ZD8918933", *td1], TODAY)
    assert r.number == "ZD8918933" and r.valid and r.number_repaired
    # a printed number that fails the check digit, or differs in more than three places, is not taken
    assert mrz.find(["ZD8918934", *td1], TODAY).number != "ZD8918934"
    assert mrz.find(["AB1234567", *td1], TODAY).number != "AB1234567"


def test_a_printed_number_is_taken_when_the_zone_lost_its_check_digit_and_the_composite_passes() -> None:
    """Motion blur (hard seed 333): the zone reads BT0040503 with its check digit as 'M'; the page prints
    BT0848503, whose recomputed check digit (8) makes the composite digit pass: print and composite agree."""
    td1 = ["I<IRLBT0040503M<<<<<<<<<<<<<<<", "8203070M3406256IRL<<<<<<<<<<<0", "NOVAK<<CLARA<DAVID<<<<<<<<<<<<"]
    assert mrz.find(td1, TODAY).number != "BT0848503"
    r = mrz.find(["BT0848503", *td1], TODAY)
    assert r.number == "BT0848503" and r.valid and "mrz.composite" in r.checks_passed
    # the check digit misread as another digit: the same
    assert mrz.find(["BT0848503", td1[0].replace("M<", "3<"), *td1[1:]], TODAY).number == "BT0848503"
    # a printed number the composite does not vouch for is not taken
    assert mrz.find(["BT0848508", *td1], TODAY).number != "BT0848508"
    assert not mrz.find(["BT0848508", *td1], TODAY).valid
    # nor without a composite digit that reads as one
    assert mrz.find(["BT0848503", td1[0], td1[1][:-1] + "<", td1[2]], TODAY).number != "BT0848503"


def test_a_j_that_lost_its_top_bar_is_still_a_name_letter() -> None:
    """Hard seed 555, a 512 px photo: the name line read as N0VAK<<]AN left the whole zone unfound."""
    td1 = ["I<AUSWF13245268<<<<<<<<<<<<<<<", "6908290M3309058AUS<<<<<<<<<<<6", "N0VAK<<]AN<<<<<<<<<<<<<<<<<<<<"]
    r = mrz.find(td1, TODAY)
    assert r is not None and r.valid and (r.number, r.name) == ("WF1324526", "NOVAK JAN")


def test_a_short_name_line_that_lost_its_closing_fillers_is_still_the_name_line() -> None:
    """A dark photo: the name line's filler run faded and OCR kept only "P<UTOLI<<ANNA<<" (15 of 44)."""
    data = "L898902C36UTO7408122F1204159ZE184226B<<<<<10"
    r = mrz.find(["P<UTOLI<<ANNA<<", data], TODAY)
    assert r is not None and r.name == "LI ANNA" and r.valid
    # without the surname/given separator a short line is not taken for the name line
    assert mrz.find(["P<UTOLIANNA", data], TODAY).name is None


@pytest.mark.parametrize("data", [
    TD3[1].replace("<<<<<", "<<<"),  # two fillers of the personal-number run lost (a dark photo, seed 606)
    TD3[1].replace("<<<<<", "<<<<<<<<"),  # three gained
])
def test_a_miscounted_filler_run_is_counted_again(data: str) -> None:
    """OCR miscounts long runs of '<'; the line is refitted by that run, and every check digit (personal
    number and composite included, which a run in the wrong place fails) decides."""
    assert len(data) != 44
    r = mrz.find([TD3[0], data], TODAY)
    assert r is not None and r.format == "TD3" and r.valid
    assert {"mrz.personal", "mrz.composite"} <= set(r.checks_passed)
    assert r.number == "L898902C3" and r.expiry_date == date(2012, 4, 15)


def test_a_run_of_fillers_does_not_stand_in_for_lost_characters() -> None:
    """Two characters of the number lost: lengthening the filler run fits the width but not the checks."""
    r = mrz.find([TD3[0], TD3[1][:2] + TD3[1][4:]], TODAY)
    assert r is None or (r.number != "L898902C3" and not r.valid)


@pytest.mark.parametrize("prefix", ["|", "0|", "||||m||", "||.||"])
def test_a_stroke_before_the_document_code_is_not_text(prefix: str) -> None:
    """Seed 111, a dark photo: the card's edge read as '|' (or '0|') in front of the name line, which then
    decoded as nothing; the passport's name came out unreadable though every check passed. A re-read strip
    that caught the edge begins with a run of strokes, a speck among them (hard tuning seed 222)."""
    r = mrz.find([prefix + TD3[0], TD3[1]], TODAY)
    assert r is not None and r.name == "ERIKSSON ANNA MARIA" and r.valid
    assert mrz.clean_ocr_line("|<UTOD231458907<<<", spaces_as_filler=False).startswith("|")  # an 'I' misread


def test_check_blind_pairs_are_the_characters_whose_values_are_ten_apart() -> None:
    assert mrz.check_blind("M", "W") and mrz.check_blind("A", "K") and mrz.check_blind("0", "A")
    assert mrz.check_blind("<", "U")  # 0 and 30
    assert not mrz.check_blind("M", "N") and not mrz.check_blind("8", "B") and not mrz.check_blind("M", "M")
    # every such substitution keeps the digit, at any of the three weights
    assert mrz.check_digit("W12") == mrz.check_digit("M12") and mrz.check_digit("1W2") == mrz.check_digit("1M2")
    assert mrz.check_digit("12W") == mrz.check_digit("12M")


def _td3(today: date) -> list[str]:
    def digit(s: str) -> str:
        return str(mrz.check_digit(s))

    number = "L898902C3"
    birth, expiry = "740812", f"{(today.year + 5) % 100:02d}0415"
    line2 = number + digit(number) + "UTO" + birth + digit(birth) + "F" + expiry + digit(expiry) + "ZE184226B<<<<<"
    line2 += digit("ZE184226B<<<<<")
    return ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", line2 + digit(line2[0:10] + line2[13:20] + line2[21:43])]


@pytest.mark.parametrize("contradictions, kept", [(0, True), (2, True), (3, False)])
def test_a_window_is_decoded_only_when_a_reading_of_it_could_be_convincing(contradictions: int, kept: bool) -> None:
    """Layout contradictions that no repair undoes ('X' in a date: no digit looks like it) are counted per line;
    two are still a convincing reading when the check digits agree, three are not, and such a window is not
    decoded at all: the bound is the one `find` keeps readings by."""
    today = date(2026, 1, 1)
    name, data = _td3(today)
    for position in (13, 14, 15)[:contradictions]:  # birth date digits
        data = data[:position] + "X" + data[position + 1:]
    decoded = mrz._decode_noisy("TD3", [name, data], today, True, frozenset())
    assert (decoded is not None) == kept
    if kept:
        result, mismatches = decoded
        assert mismatches == contradictions and "mrz.number" in result.checks_passed
    found = mrz.find([name, data], today)
    assert (found is not None and found.number == "L898902C3") == kept


def test_a_td1_zone_is_found_without_decoding_its_lines_as_a_two_line_zone() -> None:
    """A TD1 card's 30-character lines fit a 36-character format's length bound, but every reading of them as TD2
    contradicts the layout too often to be kept: those windows are given up before any decoding."""
    today = date(2026, 1, 1)
    lines = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6", "ERIKSSON<<ANNA<MARIA<<<<<<<<<<"]
    assert mrz._decode_noisy("TD2", lines[:2], today, True, frozenset()) is None
    assert mrz._decode_noisy("MRVB", lines[1:], today, True, frozenset()) is None
    found = mrz.find(lines, today)
    assert found is not None and found.number == "D23145890"
