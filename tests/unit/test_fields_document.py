"""read_document on OCR-like line lists (clean, noisy, PRC ID sides); real specimens: tests/realdata/."""

from __future__ import annotations

import dataclasses
from datetime import date

import pytest

from pipeline.formats.document import OcrLine, read_document
from pipeline.formats.mrz import check_digit
from pipeline.formats.printed_zone import label_kind
from pipeline.formats import mrz
from pipeline.trust.table import evidence_class

TODAY = date(2026, 6, 1)
TD3 = ["P<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<<<<<<<<<", "L898902C36UTO7408122F1204159ZE184226B<<<<<10"]


def page(*rows: str | tuple[str, ...], score: float = 0.98, height: float = 20.0) -> list[OcrLine]:
    """Boxes laid out like an OCR result: one row per argument, a tuple being fragments of one row."""
    lines = []
    for r, row in enumerate(rows):
        top = 10 + r * 2 * height
        left = 10.0
        for text in (row if isinstance(row, tuple) else (row,)):
            right = left + 10 * len(text)
            lines.append(OcrLine(text, score, ((left, top), (right, top), (right, top + height), (left, top + height))))
            left = right + 5
    return lines


def states(reading) -> dict[str, str]:
    return {k: v.state for k, v in reading.states.items()}


# ------------------------------------------------------------------------------------------ MRZ


def test_clean_passport() -> None:
    r = read_document(page("PASSPORT", "Surname", "ERIKSSON", "Given names", "ANNA MARIA", "L898902C3", *TD3), TODAY)
    assert r.doc_type == "passport"
    assert r.fields == {"name": "ERIKSSON ANNA MARIA", "id_number": "L898902C3", "expiry_date": "2012-04-15"}
    assert states(r) == dict.fromkeys(r.fields, "present")
    assert {"mrz.number", "mrz.birth", "mrz.expiry", "mrz.composite", "cross.name_mrz_vs_viz",
            "cross.number_mrz_vs_viz"} <= set(r.checks)
    assert r.check_failures == []
    assert all(0.9 <= s.confidence <= 1.0 for s in r.states.values())


def test_noisy_passport_fragments_k_fillers_and_swaps() -> None:
    line1 = TD3[0].replace("<<<<<<<<", "KKKKKKKK")
    line2 = TD3[1].replace("UTO", "UT0").replace("7408122", "74O8I22")
    r = read_document(page("UTOPIA", (line1[:20], line1[20:]), (line2[:28], line2[28:])), TODAY)
    assert r.fields == {"name": "ERIKSSON ANNA MARIA", "id_number": "L898902C3", "expiry_date": "2012-04-15"}
    assert "mrz.birth" in r.checks


def test_td1_id_card_and_viz_disagreement_is_reported() -> None:
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6", "ERIKSSON<<ANNA<MARIA<<<<<<<<<<"]
    r = read_document(page("Surname", "ERIKKSON", "Given names", "ANNA MARIA", *td1), TODAY)
    assert r.doc_type == "id_card"
    assert r.fields["name"] == "ERIKSSON ANNA MARIA"  # the MRZ wins
    assert "cross.name_mrz_vs_viz" in r.check_failures
    assert r.states["name"].confidence < 0.5 < r.states["id_number"].confidence


def test_failed_check_digit_lowers_confidence_but_keeps_the_reading() -> None:
    bad = [TD3[0], TD3[1].replace("F1204159", "F1204158")]
    r = read_document(page(*bad), TODAY)
    assert r.fields["expiry_date"] == "2012-04-15"
    assert "mrz.expiry" in r.check_failures and r.states["expiry_date"].confidence < 0.6


def test_a_zone_whose_number_fails_its_digit_keeps_its_name_only_where_the_page_prints_it() -> None:
    """The failed digit proves the zone misread (validate then leaves the number unreadable); the name, which no
    digit covers, is kept only when the printed zone confirms it; the expiry passes a digit of its own."""
    bad = [TD3[0], TD3[1].replace("L898902C36", "L898902C31")]
    alone = read_document(page(*bad), TODAY)
    assert "mrz.number" in alone.check_failures and "mrz.expiry" in alone.checks
    assert states(alone)["name"] == "unreadable" and alone.fields["expiry_date"] == "2012-04-15"
    printed = read_document(page("Surname", "ERIKSSON", "Given names", "ANNA MARIA", *bad), TODAY)
    assert printed.fields["name"] == "ERIKSSON ANNA MARIA" and "cross.name_mrz_vs_viz" in printed.checks


def test_mrz_data_line_alone_leaves_name_unreadable() -> None:
    r = read_document(page("PASSPORT", TD3[1]), TODAY)
    assert r.doc_type == "passport"
    assert r.fields == {"name": None, "id_number": "L898902C3", "expiry_date": "2012-04-15"}
    assert states(r)["name"] == "unreadable"


def test_page_without_document_invents_nothing() -> None:
    r = read_document(page("Hello world", "Invoice 2024", "Total 12.50"), TODAY)
    assert r.doc_type == "unknown"
    assert r.fields == {"name": None, "id_number": None, "expiry_date": None}
    assert set(states(r).values()) == {"unreadable"}
    assert read_document([], TODAY).fields == r.fields


# ---------------------------------------------------------------------------------------- PRC ID

NUMBER = "513701199507176354"  # odd 17th digit: male, born 1995-07-17, checksum valid
FRONT = ["姓名张三", ("性别男", "民族汉"), "出生 1995 年 7 月 17 日", "住址四川省成都市武侯区益州", ("公民身份号码", NUMBER)]
BACK = ["中华人民共和国", "居民身份证", "签发机关 四川省成都市锦江分局", ("有效期限", "2010.01.01-2020.12.12")]


def test_cn_front_only_expiry_absent() -> None:
    r = read_document(page(*FRONT), TODAY)
    assert r.doc_type == "cn_id"
    assert r.fields == {"name": "张三", "id_number": NUMBER, "expiry_date": None}
    assert states(r) == {"name": "present", "id_number": "present", "expiry_date": "absent"}
    assert {"cn_id.checksum", "cn_id.birth_matches_printed", "cn_id.sex_matches_printed"} <= set(r.checks)


def test_cn_back_only_name_and_number_absent() -> None:
    r = read_document(page(*BACK), TODAY)
    assert r.fields == {"name": None, "id_number": None, "expiry_date": "2020-12-12"}
    assert states(r) == {"name": "absent", "id_number": "absent", "expiry_date": "present"}



@pytest.mark.parametrize(("back", "misread"), [
    (BACK, False),
    (["中华人民共和国", "居民身份证", "签发机关 四川省成都市锦江分局", ("有数期限", "2010.01.01-2020.12.12")], True),
    (["中华人民共和国", "居民身份证", "签发机美 四川省成都市锦江分局", ("有效美展", "2010.01.01-2020.12.12")], True),
    (["中华人民共和国", "居民身份证", "签发机关 四川省成都市锦江分局", ("有效期限", "2010.01.01-2020.12.12"),
      "有关部门"], False),  # more than half the characters differ: another word, not the label misread
    (["性制男"], True),  # a two-character label, recognised by the value only it is printed with
    (["出玍 1995 年 7 月 17 日"], True),
    (["住宅小区 8 栋"], False),  # an ordinary word one character from 住址: nothing says it is the label
])
def test_a_cn_card_whose_fixed_labels_read_wrong_gives_its_name_an_evidence_class_of_its_own(
        back: list, misread: bool) -> None:
    """A capture that garbles the card's fixed labels may garble the name too, which no check covers: its
    name's evidence class says so (and a table that never measured it caps it below the threshold); the number
    keeps its checksum's class."""
    r = read_document(page(*FRONT, *back), TODAY)
    assert r.fields["name"] == "张三" and r.fields["id_number"] == NUMBER
    assert ("cn_id.labels_legible" in r.check_failures) == misread
    name_class = evidence_class("name", "cn_id", r.checks, r.check_failures)
    assert name_class == ("name/cn.passed_labels_misread" if misread else "name/cn.passed")
    assert evidence_class("id_number", "cn_id", r.checks, r.check_failures) == "id_number/cn.passed"


def test_a_shaken_cn_name_has_a_class_of_its_own_and_the_number_keeps_its_checksums() -> None:
    """The name's box smeared by camera shake (`capture.field_sharp` failed, measured by the OCR backend from the
    pixels): the name, which no check covers, gets its own class; the number and expiry keep theirs."""
    from pipeline.formats.document_format import SHARP_CHECK

    r = read_document(page(*FRONT), TODAY)
    assert evidence_class("name", "cn_id", r.checks + [SHARP_CHECK], r.check_failures) == "name/cn.passed"
    shaken = r.check_failures + [SHARP_CHECK]
    assert evidence_class("name", "cn_id", r.checks, shaken) == "name/cn.passed_shaken"
    assert evidence_class("name", "cn_id", r.checks, shaken + ["cn_id.labels_legible"]) == \
        "name/cn.passed_labels_misread_shaken"
    assert evidence_class("id_number", "cn_id", r.checks, shaken) == "id_number/cn.passed"
    # a zone's name is never measured, and a failed sharpness check names no class of the zone's
    zone_class = evidence_class("name", "passport", ["mrz.number", "cross.name_mrz_vs_viz"], [SHARP_CHECK])
    assert "shaken" not in zone_class


def test_cn_portrait_side_with_lost_labels_is_unreadable_not_absent() -> None:
    """Both sides photographed small: the portrait side's labels were not read and its number fails the
    checksum, but an 18-character number on the page shows the side is there, so its fields are unreadable."""
    r = read_document(page("157589840", "110101197109048827", "中华人民共和国", "居民身份证"), TODAY)
    assert states(r) == {"name": "unreadable", "id_number": "unreadable", "expiry_date": "unreadable"}
    # an 18-digit number on a page that is no PRC card does not make it one
    assert read_document(page("ACCOUNT", "110101197109048827"), TODAY).doc_type != "cn_id"


@pytest.mark.parametrize(("validity", "expected"), [
    ("2015.03.01至长期", "long-term"),
    ("2015.03.01—长期", "long-term"),
    ("2015.03.01至2035.03.01", "2035-03-01"),
    ("2015.03.01—2035.03.01", "2035-03-01"),
])
def test_cn_back_validity_forms(validity: str, expected: str) -> None:
    r = read_document(page("签发机关 北京市公安局", f"有效期限 {validity}"), TODAY)
    assert r.fields["expiry_date"] == expected and r.states["expiry_date"].state == "present"


def test_cn_both_sides() -> None:
    r = read_document(page(*FRONT, *BACK), TODAY)
    assert r.fields == {"name": "张三", "id_number": NUMBER, "expiry_date": "2020-12-12"}
    assert set(states(r).values()) == {"present"}


def test_cn_unreadable_fields_stay_none() -> None:
    # front with a number whose checksum fails and a back whose end date does not exist
    r = read_document(page("姓名张三", "公民身份号码 513701199507176353", "有效期限 2010.01.01-2020.02.30"), TODAY)
    assert r.fields == {"name": "张三", "id_number": None, "expiry_date": None}
    assert states(r) == {"name": "present", "id_number": "unreadable", "expiry_date": "unreadable"}


def test_cn_sex_mismatch_lowers_confidence() -> None:
    female = "513701199507176346"
    r = read_document(page("姓名张三", "性别男", "出生 1995 年 7 月 17 日", "公民身份号码", female), TODAY)
    assert "cn_id.sex_matches_printed" in r.check_failures
    assert r.states["id_number"].confidence <= 0.5


def test_score_prefers_the_upright_reading() -> None:
    upright = read_document(page(*TD3), TODAY)
    upside_down = read_document(page(TD3[1][::-1], TD3[0][::-1]), TODAY)
    assert upright.score > upside_down.score


# --------------------------------------------------------------------- names must look like names

@pytest.mark.parametrize(("text", "ok"), [
    ("ERIKSSON ANNA MARIA", True), ("O'NEILL SEAN", True), ("JEAN-PIERRE", True), ("MÜLLER JÖRG", True),
    ("张三", True), ("阿依古丽·买买提", True),
    ("SG3GI9DECZOOSIOJANZO34", False), ("", False), (None, False), ("A", False), ("- -", False),
    ("MARIE, ANNE", False), ("ANNA<MARIA", False), ("JOHN 2", False),
])
def test_looks_like_name(text: str | None, ok: bool) -> None:
    from pipeline.formats.names import looks_like_name

    assert looks_like_name(text) is ok


def _with_name_line(name_field: str) -> list[str]:
    return [("P<UTO" + name_field).ljust(44, "<"), TD3[1]]


def test_a_printed_name_with_national_letters_confirms_the_zone_that_transliterates_it() -> None:
    """ICAO 9303 Part 3: a zone spells Æ as AE, Ø as OE, Þ as TH, and Ä, Å, Ö, Ü either as AE, AA, OE, UE or
    without the mark, as the issuer chooses; a page printing the national letters confirms either spelling."""
    cases = [("MUELLER<<JOERG", "MÜLLER", "JØRG"), ("MULLER<<ASA", "MÜLLER", "ÅSA"),
             ("AEVARSDOTTIR<<THURIDUR<OESP", "ÆVARSDÓTTIR", "ÞURÍÐUR ÖSP"), ("AASEN<<KNUT", "ÅSEN", "KNUT")]
    for field, surname, given in cases:
        r = read_document(page("Surname", surname, "Given names", given, *_with_name_line(field)), TODAY)
        assert "cross.name_mrz_vs_viz" in r.checks, (field, r.check_failures)
        assert r.fields["name"] == field.replace("<<", " ").replace("<", " ")
    other = read_document(page("Surname", "MÜLLER", "Given names", "JÖRG", *_with_name_line("MILLER<<JOERG")), TODAY)
    assert "cross.name_mrz_vs_viz" in other.check_failures


def test_zone_debris_is_never_a_name() -> None:
    # digits survive the name-field repair (3, 4, 9 have no letter twin): not a name, whatever its score
    debris = _with_name_line("SG3GI9DECZOOSIOJANZO34")
    r = read_document(page("PASSPORT", *debris), TODAY)
    assert r.fields["name"] is None and states(r)["name"] == "unreadable"
    assert "name.shape" in r.check_failures
    assert r.fields["id_number"] == "L898902C3"  # check-digit protected fields are unaffected
    # with a labelled printed name the page still has one source, read at heuristic confidence
    r = read_document(page("Surname", "ERIKSSON", "Given names", "ANNA MARIA", *debris), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA MARIA" and r.states["name"].confidence <= 0.5


@pytest.mark.parametrize(("surname_label", "given_label"), [("Sumame", "Givenrames"), ("Sumtame", "Gien rames")])
def test_labels_with_rn_read_as_m_still_name_their_values(surname_label: str, given_label: str) -> None:
    """Small print's "rn" is read as "m" (motion-blurred TD2 and visa pages of the hard tuning set): the labels
    still name the printed name, which is then the page's only source of a name whose zone line was lost."""
    r = read_document(page(surname_label, "LIU", given_label, "LIXIAO", *_with_name_line("LI|<<LIXIA0")), TODAY)
    assert r.fields["name"] == "LIU LIXIAO" and r.states["name"].confidence <= 0.5


@pytest.mark.parametrize(("surname_label", "given_label"), [("Suname Nom", "Given mamesPrenoms"),
                                                            ("Surname Nom", "Given names Prénoms")])
def test_bilingual_labels_whose_slash_was_lost_still_name_their_values(surname_label: str, given_label: str) -> None:
    """A blurred passport page reads "Surname / Nom" as "Suname Nom" (the slash lost) and "Given names /
    Prénoms" glued into one word: each part still names the field, so the printed name is found."""
    r = read_document(page(surname_label, "XU", given_label, "MIN", TD3[1]), TODAY)  # the name line lost
    assert r.fields["name"] == "XU MIN" and r.states["name"].confidence <= 0.5


def test_one_label_word_beside_other_text_is_no_label() -> None:
    # "Nom d'usage" (the French alternate-name label) starts with a surname label but is none
    assert label_kind("Nom d'usage") is None and label_kind("JEAN PIERRE") is None
    assert label_kind("Date of expiy Date drexpiration") == "expiry"


def test_short_debris_is_no_label() -> None:
    """Serbia's real specimen: 'Npee/ Suae' (a Cyrillic/Latin label mangled) above 'TECT' is no surname label; read
    as one, its value contradicted the zone's TEST<<MILICA and the name was lost."""
    td1 = ["IDSRB9555555461<2902968000000<", "6802295F1307245SRB<<<<<<<<<<<6", "TEST<<MILICA<<<<<<<<<<<<<<<<<<"]
    r = read_document(page("Npee/ Suae", "TECT", "Vee/Given Rame", "A", *td1), TODAY)
    assert r.fields["name"] == "TEST MILICA"


def test_zone_and_printed_names_that_contradict_are_unreadable() -> None:
    r = read_document(page("Surname", "SMITH", "Given names", "JOHN", *TD3), TODAY)
    assert r.fields["name"] is None and states(r)["name"] == "unreadable"
    assert "cross.name_mrz_vs_viz" in r.check_failures
    assert r.fields["id_number"] == "L898902C3" and r.fields["expiry_date"] == "2012-04-15"


def test_printed_name_that_is_not_a_name_is_not_stored() -> None:
    r = read_document(page("Surname", "12345", "Given names", "6789", "Passport No", "X1234567"), TODAY)
    assert r.fields["name"] is None and states(r)["name"] == "unreadable"


# ------------------------------------------------------------------ TD2 cards and MRV-B visas

# ICAO 9303 Part 6 (TD2) and Part 7 (MRV-B) specimens.
TD2 = ["I<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "D231458907UTO7408122F1204159<<<<<<<6"]
MRVB = ["V<UTOERIKSSON<<ANNA<MARIA<<<<<<<<<<<", "L8988901C4XXX4009078F9612109<<<<<<<<"]


@pytest.mark.parametrize(("zone", "doc_type", "number", "expiry"), [
    (TD2, "id_card", "D23145890", "2012-04-15"), (MRVB, "visa", "L8988901C", "1996-12-10")])
def test_td2_and_mrvb_pages_with_ocr_noise(zone: list[str], doc_type: str, number: str, expiry: str) -> None:
    noisy = [zone[0].replace("<<<<", "KKKK"), zone[1][:20] + " " + zone[1][20:].replace("<", "«")]
    for lines in (zone, noisy):
        r = read_document(page("UTOPIA", *lines), TODAY)
        assert r.doc_type == doc_type
        assert r.fields == {"name": "ERIKSSON ANNA MARIA", "id_number": number, "expiry_date": expiry}
        assert {"mrz.number", "mrz.birth", "mrz.expiry"} <= set(r.checks)
        assert ("mrz.composite" in r.checks) is (doc_type == "id_card")  # visas have no composite digit


def test_lone_filler_read_as_k_is_split_only_where_the_page_shows_the_words() -> None:
    glued = [TD3[0].replace("ANNA<MARIA", "ANNAKMARIA"), TD3[1]]
    r = read_document(page("Surname", "ERIKSSON", "Given names", "ANNA MARIA", *glued), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA MARIA" and "cross.name_mrz_vs_viz" in r.checks
    # without the printed words the zone is read as printed: KMARIA could be a name
    assert read_document(page(*glued), TODAY).fields["name"] == "ERIKSSON ANNAKMARIA"


# ------------------------------------------------------------- printed name vs the zone's own name

AZE_TD3 = ["PCAZEABDULLAYEV<<DIL<<<<<<<<<<<<<<<<<<<<<<<<", "C193895647AZE9408148M28081525188L2V<<<<<<<42"]


def test_printed_name_continuing_a_closed_zone_name_is_kept_but_is_a_disagreement() -> None:
    """The MIDV-2020 Azerbaijani template: the printed zone gives surname and "given name, patronymic"; the
    zone (and its printed Latin line) lost the given name's first letter and closes ABDULLAYEV<<DIL with
    fillers, so it is complete: the printed reading is kept for the person, but as a disagreement."""
    r = read_document(page("Soyadi/Surname", "ABDULLAYEV", "Adi, atasinin adi/Given name, patronymic",
                           "ADIL BƏKIR OĞLU", "DIL", *AZE_TD3), TODAY)
    assert r.fields["name"] == "ABDULLAYEV ADIL BƏKIR OĞLU"
    assert "cross.name_printed_extends_mrz" not in r.checks and "cross.name_mrz_vs_viz" in r.check_failures
    from pipeline.trust.table import evidence_class, shipped
    cls = evidence_class("name", r.doc_type, r.checks, r.check_failures)
    assert cls == "name/mrz.name_vs_printed_failed" and shipped().confidence(cls, 1.0) < 0.95


@pytest.mark.parametrize("printed_given", ["ANNA", "ANNA MARIA", "ANNE MARIA LOUISE", "MARIA ANNA LOUISE"])
def test_a_printed_name_that_does_not_continue_the_zone_name_is_not_taken(printed_given: str) -> None:
    r = read_document(page("Surname", "ERIKSSON", "Given names", printed_given, *TD3), TODAY)
    assert "cross.name_printed_extends_mrz" not in r.checks
    assert r.fields["name"] in ("ERIKSSON ANNA MARIA", None)


def test_the_zone_name_line_cannot_confirm_itself() -> None:
    """OCR split a TD1 name line into "ERIKSSON<<", "ANNA<MARIA" and a run of fillers: the fragments sit in the
    zone's band, so they are not printed evidence for the zone's name."""
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6"]
    split = ("ERIKSSON<<", "ANNA<MARIA", "<<<<<<<<<<")
    r = read_document(page("IDENTITY CARD", *td1, split), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA MARIA"
    assert "cross.name_mrz_vs_viz" not in r.checks
    r = read_document(page("ERIKSSON", "ANNA MARIA", *td1, split), TODAY)
    assert "cross.name_mrz_vs_viz" in r.checks


def test_a_final_a_swallowed_by_a_filler_run_read_as_as_is_restored_only_from_the_page() -> None:
    zone = [TD3[0].replace("<<<<<<<<<<<<<<<<<<<", "AAAAAAAAAAAAAAAAAAA"), TD3[1]]
    assert read_document(page("PASSPORT", "ERIKSSON", "ANNA MARIA", *zone), TODAY).fields["name"] == \
        "ERIKSSON ANNA MARIA"
    assert read_document(page("PASSPORT", *zone), TODAY).fields["name"] == "ERIKSSON ANNA MARI"


def sure_letters(lines: list[OcrLine], unsure: dict[str, tuple[int, float]] | None = None) -> list[OcrLine]:
    """The boxes with the recogniser's per-letter probabilities: 0.99 each, except `unsure`: box text ->
    (index of a letter, its probability)."""
    out = []
    for x in lines:
        scores = [0.99] * len(x.text)
        if unsure and x.text in unsure:
            i, score = unsure[x.text]
            scores[i] = score
        out.append(dataclasses.replace(x, char_scores=tuple(scores)))
    return out


@pytest.mark.parametrize(("zone_name", "unsure", "printed", "respelled"), [
    ("HOFFMAMN<<MARIA", "MAMN", ("HOFFMANN", "MARIA"), "HOFFMANN MARIA"),  # a blurred N read as M
    ("HU<<TAOHAIK", "AIK", ("HU", "TAOHAN"), "HU TAOHAN"),  # N and the filler after it read as IK
    ("VANIDER<BERG<<EMMA", "ANIDER", ("VAN DER BERG", "EMMA"), "VAN DER BERG EMMA"),  # a filler read as I
    ("HOFFMAMN<<MARIA", "MAMN", ("HOFFMAN", "MARIA"), "HOFFMAN MARIA"),  # an unsure letter the print lacks
])
def test_a_zone_name_word_misread_where_the_page_prints_it_surely_is_spelled_as_printed(
        zone_name: str, unsure: str, printed: tuple[str, str], respelled: str) -> None:
    """`unsure`: the zone letter the recogniser was unsure of is this text's third."""
    from pipeline.trust.rules import disagreeing_fields
    line1 = f"P<UTO{zone_name}".ljust(44, "<")
    unsure_at = line1.index(unsure) + 2
    lines = sure_letters(page("PASSPORT", "Surname", printed[0], "Given names", printed[1], line1, TD3[1]),
                         {line1: (unsure_at, 0.6)})
    r = read_document(lines, TODAY)
    assert r.fields["name"] == respelled
    assert "cross.name_respelled_as_printed" in r.check_failures and "cross.name_mrz_vs_viz" not in r.checks
    assert evidence_class("name", r.doc_type, r.checks, r.check_failures) == "name/mrz.name_respelled"
    assert disagreeing_fields(r.check_failures) == {"name"}  # capped below auto-accept: a person confirms it
    # the zone's letters read surely: nothing decides between the two spellings, the zone's stands
    sure = read_document(sure_letters(page("PASSPORT", "Surname", printed[0], "Given names", printed[1], line1,
                                           TD3[1])), TODAY)
    assert sure.fields["name"] == " ".join(zone_name.replace("<<", " ").replace("<", " ").split())
    assert "cross.name_respelled_as_printed" not in sure.check_failures


@pytest.mark.parametrize(("printed", "unsure_print"), [
    ("HOFFMANN", True),  # the print is no surer than the zone
    ("HOFFMANNS", False),  # the print differs where the zone was sure too (a mark read as a letter, a longer name)
    ("HUFFMAMN", False),
    ("HUFFMEIER", False),  # another word
])
def test_a_zone_name_word_is_not_respelled_from_a_print_that_cannot_decide(printed: str, unsure_print: bool) -> None:
    line1 = "P<UTOHOFFMAMN<<MARIA".ljust(44, "<")
    unsure = {line1: (line1.index("MAMN") + 2, 0.6)}
    if unsure_print:
        unsure[printed] = (6, 0.7)
    r = read_document(sure_letters(page("PASSPORT", "Surname", printed, "Given names", "MARIA", line1, TD3[1]),
                                   unsure), TODAY)
    assert r.fields["name"] in ("HOFFMAMN MARIA", None)
    assert "cross.name_respelled_as_printed" not in r.check_failures


def test_a_number_repaired_by_its_own_check_digit_is_confirmed_only_by_the_page() -> None:
    from pipeline.trust.table import evidence_class
    zone = [TD3[0], TD3[1].replace("L898902C3", "L8989O2C3")]
    alone = read_document(page("PASSPORT", *zone), TODAY)
    assert alone.fields["id_number"] == "L898902C3" and "repair.mrz_number_unconfirmed" in alone.check_failures
    assert evidence_class("id_number", alone.doc_type, alone.checks, alone.check_failures) == \
        "id_number/mrz.number_unconfirmed"
    shown = read_document(page("PASSPORT", "L898902C3", *zone), TODAY)
    assert "repair.mrz_number_unconfirmed" not in shown.check_failures and "cross.number_mrz_vs_viz" in shown.checks
    # a printed number that differs (and does not pass the digit itself): the repair has nothing vouching for it
    contradicted = read_document(page("Document No.", "L898902C5", *zone), TODAY)
    assert contradicted.fields["id_number"] is None and states(contradicted)["id_number"] == "unreadable"
    # ... but where the page also prints the repaired number, the page confirms it (a label's value may be wrong)
    confirmed = read_document(page("Document No.", "L898902C5", "L898902C3", *zone), TODAY)
    assert confirmed.fields["id_number"] == "L898902C3" and "cross.number_mrz_vs_viz" in confirmed.checks
    # the one number printed on the page, its label not read, contradicts the repair just the same (hard seed 555:
    # a misaligned zone reading "repaired" to SWF13Z45Z beside a printed WF1324526, stored at 0.9)
    unlabelled = read_document(page("XR4512390", *zone), TODAY)
    assert unlabelled.fields["id_number"] is None and states(unlabelled)["id_number"] == "unreadable"


def test_a_filler_read_as_k_after_a_name_is_cut_only_where_the_page_shows_the_name() -> None:
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6"]
    misread = "OCONNOR<<JOHNK<<<<<<<<<<<<<<<<"
    r = read_document(page("Surname", "OCONNOR", "Given names", "JOHN", *td1, misread), TODAY)
    assert r.fields["name"] == "OCONNOR JOHN" and "cross.name_mrz_vs_viz" in r.checks
    assert read_document(page(*td1, misread), TODAY).fields["name"] == "OCONNOR JOHNK"  # could be a name
    erik = read_document(page("Surname", "OCONNOR", "Given names", "ERIK", *td1, "OCONNOR<<ERIK<<<<<<<<<<<<<<<<<"),
                         TODAY)
    assert erik.fields["name"] == "OCONNOR ERIK"


def test_a_dates_month_word_neither_cuts_nor_confirms_a_zone_name() -> None:
    """A given name MARK whose print is hidden, beside a printed date "22 MAR 2024": the month is no name, so the
    zone's MARK is not cut to MAR (the K taken for a filler) and MAR confirms nothing."""
    td1 = ["I<NLDTV03552311<<<<<<<<<<<<<<<", "6208059F2403225NLD<<<<<<<<<<<2"]
    zone = "HOFFMANN<<MARK<<<<<<<<<<<<<<<<"
    dated = read_document(page("Surname", "HOFFMANN", "Date of expiry", "22 MAR 2024", *td1, zone), TODAY)
    assert dated.fields["name"] == "HOFFMANN MARK"
    # the same month word standing alone (a name printed MAR) still cuts a filler read as K
    named = read_document(page("Surname", "HOFFMANN", "Given names", "MAR", *td1, "HOFFMANN<<MARK<<<<<<<<<<<<<<<<"),
                          TODAY)
    assert named.fields["name"] == "HOFFMANN MAR"
    # a date's month confirms no zone word: a zone given name MAR stays as unconfirmed as without the date
    alone = read_document(page("Surname", "HOFFMANN", *td1, "HOFFMANN<<MAR<<<<<<<<<<<<<<<<<"), TODAY)
    beside = read_document(page("Surname", "HOFFMANN", "22 MAR 2024", *td1, "HOFFMANN<<MAR<<<<<<<<<<<<<<<<<"),
                           TODAY)
    assert beside.fields["name"] == alone.fields["name"] == "HOFFMANN MAR"
    assert evidence_class("name", beside.doc_type, beside.checks, beside.check_failures) == \
        evidence_class("name", alone.doc_type, alone.checks, alone.check_failures)


def test_letters_among_the_closing_fillers_are_dropped_only_where_the_page_prints_the_rest() -> None:
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6"]
    misread = "VAN<DER<BERG<<LUCAS<A<<<<A<<<A"
    r = read_document(page("Surname", "VAN DER BERG", "Given names", "LUCAS", *td1, misread), TODAY)
    assert r.fields["name"] == "VAN DER BERG LUCAS" and "mrz.name_fillers" in r.check_failures
    assert read_document(page(*td1, misread), TODAY).fields["name"] == "VAN DER BERG LUCAS A"
    # a real initial on a line read cleanly stays
    initial = read_document(page("VAN DER BERG", "LUCAS", *td1, "VAN<DER<BERG<<LUCAS<A<<<<<<<<<"), TODAY)
    assert initial.fields["name"] == "VAN DER BERG LUCAS A"


def test_long_words_among_the_closing_fillers_the_page_does_not_print_leave_the_name_unreadable() -> None:
    """Hard tuning seed 107, motion blur: JANSEN<<HUGO<<<<... read with its fillers as "<<M<AAAMMA" (letters
    after a second '<<': a misread line). JANSEN and HUGO are printed, M and AAAMMA nowhere: the zone's name
    was stored as JANSEN HUGO M AAAMMA. Too long to drop as debris, too unlike the print to keep: unreadable."""
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6"]
    r = read_document(page("gurname", "JANSEN", "HUGO", *td1, "JANSEN<<HUGO<<M<AAAMMA<<<<<<<<"), TODAY)
    assert r.fields["name"] is None and states(r)["name"] == "unreadable"
    assert {"mrz.name_fillers", "cross.name_mrz_vs_viz"} <= set(r.check_failures)
    # a line read cleanly keeps a given name the page does not show (a print cut short confirms nothing)
    clean = read_document(page("gurname", "JANSEN", "HUGO", *td1, "JANSEN<<HUGO<MARIUS<<<<<<<<<<<"), TODAY)
    assert clean.fields["name"] == "JANSEN HUGO MARIUS"


def test_a_printed_number_in_groups_confirms_the_zone_and_a_label_taken_for_it_contradicts_nothing() -> None:
    """Pages print numbers in groups ("000-L898902C3-01" style separators, spaces, dots) that the zone holds as
    bare characters: the same characters confirm the zone's number. A label's words read as the number's value
    (no digits: the layout put another label under it) name no number, so they contradict nothing; a number
    that differs in its characters still does."""
    for printed in ("L898-902-C3", "L898 902.C3", "00-L898902C3-01"):
        r = read_document(page("Passport No.", printed, *TD3), TODAY)
        assert "cross.number_mrz_vs_viz" in r.checks and not r.check_failures, printed
    label = read_document(page("Passport No.", "Type/Code of issuing State", *TD3), TODAY)
    assert "cross.number_mrz_vs_viz" not in label.check_failures and label.fields["id_number"] == "L898902C3"
    other = read_document(page("Passport No.", "L898-902-C4", *TD3), TODAY)
    assert "cross.number_mrz_vs_viz" in other.check_failures


def test_a_zone_number_that_fails_its_digit_and_differs_from_the_printed_one_is_unreadable() -> None:
    """The OCR garbled the zone's number (an occluder across its line: 0 read as 6, which no confusion table
    allows) and the page prints a number that does not pass the zone's digit either: neither reading is
    evidence for itself, so nothing is stored (it goes to review)."""
    garbled = [TD3[0], "L898962C36UTO7408122F1204159ZE184226B<<<<<10"]
    r = read_document(page("Document No.", "L898902C5", *garbled), TODAY)
    assert r.fields["id_number"] is None and states(r)["id_number"] == "unreadable"
    assert {"mrz.number", "cross.number_mrz_vs_viz"} <= set(r.check_failures)
    # a printed number that passes the zone's digit is taken instead (the printed alternatives)
    assert read_document(page("Document No.", "L898902C3", *garbled), TODAY).fields["id_number"] == "L898902C3"
    # the same failed digit with no printed number to contradict it is kept, at low confidence
    alone = read_document(page(*garbled), TODAY)
    assert alone.fields["id_number"] == "L898962C3" and alone.states["id_number"].confidence < 0.6


def _td3_with_number(number: str) -> list[str]:
    data = number + str(check_digit(number)) + TD3[1][10:43]
    composite = data[:10] + data[13:20] + data[21:43]
    return [TD3[0], data + str(check_digit(composite))]


def test_a_zone_number_the_page_prints_with_a_letter_its_check_digit_cannot_tell_apart_is_unreadable() -> None:
    """M and W are 10 apart in the check digit's values, so a zone read with M for W passes every digit (hard
    tuning seed 107, motion blur: MX8510518 beside a printed WX8510518). Where the page prints the number with
    the other letter, nothing says which reading is right: unreadable, never the zone's guess."""
    read_m, printed_w = _td3_with_number("M898902C3"), "W898902C3"
    assert mrz.parse(read_m, TODAY).valid and mrz.parse(_td3_with_number(printed_w), TODAY).valid
    r = read_document(page("PASSPORT", printed_w, *read_m), TODAY)
    assert r.fields["id_number"] is None and "cross.number_mrz_vs_viz" in r.check_failures
    # one more misread in the print (8 as E) still shows the twin; the zone's number printed as read confirms it
    assert read_document(page("PASSPORT", "WE98902C3", *read_m), TODAY).fields["id_number"] is None
    same = read_document(page("PASSPORT", printed_w, *_td3_with_number(printed_w)), TODAY)
    assert same.fields["id_number"] == printed_w and "cross.number_mrz_vs_viz" in same.checks
    # with no printed number nothing contradicts the zone
    assert read_document(page("PASSPORT", *read_m), TODAY).fields["id_number"] == "M898902C3"


def test_a_zone_name_the_print_goes_on_past_is_not_confirmed_by_its_words() -> None:
    """Seed 111, a dark photo: OCR lost "MIA<<<<<" from the TD1 name line, leaving MARTIN<<MARIA. Both words are
    printed, but the printed box "MARIA MIA" goes on past the zone's last word: the zone's name is incomplete,
    so it is unreadable (it had been stored at 0.98 and auto-accepted), not confirmed."""
    td1 = ["I<UTOD231458907<<<<<<<<<<<<<<<", "7408122F1204159UTO<<<<<<<<<<<6"]
    short = ("ERIKSSON<<ANNA<", "<<<<<<<<")
    r = read_document(page("IDENTITY CARD", "ERIKSSON", "ANNA MARIA", *td1, short), TODAY)
    assert r.states["name"].state == "unreadable" and "cross.name_mrz_vs_viz" in r.check_failures
    assert r.fields["id_number"] == "D23145890"
    # the whole name line, or a print that stops where the zone does, or a sex code after the name: confirmed
    for printed in (("ERIKSSON", "ANNA MARIA"), ("ERIKSSON", "ANNA MARIA F")):
        r = read_document(page("IDENTITY CARD", *printed, *td1, "ERIKSSON<<ANNA<MARIA<<<<<<<<<<"), TODAY)
        assert r.fields["name"] == "ERIKSSON ANNA MARIA" and "cross.name_mrz_vs_viz" in r.checks
    r = read_document(page("IDENTITY CARD", "ERIKSSON", "ANNA", *td1, short), TODAY)
    assert r.fields["name"] == "ERIKSSON ANNA" and "cross.name_mrz_vs_viz" in r.checks


@pytest.mark.parametrize("printed", [
    "ANDRIS JANIS PARAUDZINS",  # Latvia: the historical form of the whole name, the zone's surname again
    "Andris Paraudzinsh",  # a signature read as text (Austria's specimen: "Isolde Hustefre")
    "00000 ANDRIS (SPE)",  # an address line (Monaco's specimen: "00000 SPECIMEN (SPE)")
])
def test_other_text_after_the_zone_names_last_word_does_not_make_it_incomplete(printed: str) -> None:
    zone = ["I<LVAPA99929216121282<88882<<<", "8212122M1703054LVA<<<<<<<<<<<0", "PARAUDZINS<<ANDRIS<<<<<<<<<<<<"]
    r = read_document(page("PARAUDZINS", "ANDRIS", printed, *zone), TODAY)
    assert r.fields["name"] == "PARAUDZINS ANDRIS" and "cross.name_mrz_vs_viz" in r.checks


def test_the_early_stop_sees_the_printed_values_as_the_cross_checks_compare_them() -> None:
    """The page reader skips decodes while the printed text cannot yet hold the zone's name and number
    (`page_read._values_in_text`, a necessary condition for the page to be decided): a number printed in groups
    and a name printed with national letters are there, as the cross-checks that decide the page find them."""
    from pipeline.extract.ocr.page_read import _values_in_text

    zone = _with_name_line("AEVARSDOTTIR<<THURIDUR")
    lines = page("Surname", "ÆVARSDÓTTIR", "Given names", "ÞURÍÐUR", "Passport No.", "L898-902-C3", *zone)
    reading = read_document(lines, TODAY)
    assert {"cross.name_mrz_vs_viz", "cross.number_mrz_vs_viz"} <= set(reading.checks)
    assert _values_in_text(lines, reading)
    assert not _values_in_text([x for x in lines if x.text != "L898-902-C3"], reading)


def test_a_name_read_with_full_width_letters_is_stored_with_the_letters_printed() -> None:
    """The recogniser sometimes gives a letter it has no Latin class for (Ğ) as its full-width form (Ｇ): the
    stored name has the ordinary letter, as a model's answer has (NFKC); CJK names are unchanged."""
    from pipeline.formats.reading import Builder

    b = Builder()
    b.present("name", "ABRAMOV ADNAN AＧAMUSA OＧLU", 0.9)
    assert b.fields["name"] == "ABRAMOV ADNAN AGAMUSA OGLU" and b.states["name"].value == b.fields["name"]
    b.present("name", "张三", 0.9)
    assert b.fields["name"] == "张三"
