"""Card fronts whose zone is on the back (FR 2021, DE, NL, IT, ES), read by label from OCR-like boxes laid out
as the cards print them: labels with their values under them or beside them, the number where the issuer
prints it."""

from __future__ import annotations

from datetime import date

from pipeline.formats.document import OcrLine, read_document
from pipeline.formats.printed_zone import label_kind, read_printed

TODAY = date(2026, 6, 1)
H = 20.0


def box(text: str, left: float, top: float, height: float = H) -> OcrLine:
    right = left + 0.6 * height * len(text)
    return OcrLine(text, 0.97, ((left, top), (right, top), (right, top + height), (left, top + height)))


def below(label: str, value: str, left: float, top: float) -> list[OcrLine]:
    """A label and its value under it, as the card layouts print them."""
    return [box(label, left, top, 14), box(value, left, top + 20)]


def beside(label: str, value: str, left: float, top: float) -> list[OcrLine]:
    """A label and its value to its right on the same line."""
    lab = box(label, left, top + 3, 14)
    return [lab, box(value, lab.right + 12, top)]


def fr_2021(surname: str = "DUBOIS", given: str = "Maëlys-Gaëlle, Marie", number: str = "X4RTBPFW4",
            expiry: str = "11 02 2031") -> list[OcrLine]:
    return [box("RÉPUBLIQUE FRANÇAISE", 230, 16), box("CARTE NATIONALE D'IDENTITÉ / IDENTITY CARD", 230, 48, 16),
            *below("NOM / Surname", surname, 240, 90), *below("Prénoms / Given names", given, 240, 150),
            *below("SEXE / Sex", "F", 240, 210), *below("DATE DE NAISS. / Date of birth", "13 07 1990", 600, 210),
            *below("Nom d'usage / Alternate name", "-", 240, 330),
            *below("N° DU DOCUMENT / Document No", number, 240, 400),
            *below("DATE D'EXPIR. / Expiry date", expiry, 540, 400), box("656115", 700, 490)]


def de_front(number: str = "L01X00T47", given: str = "ERIKA") -> list[OcrLine]:
    return [box("BUNDESREPUBLIK DEUTSCHLAND", 30, 18), box("PERSONALAUSWEIS", 30, 48, 16), box(number, 640, 20, 24),
            *below("NAME/SURNAME/NOM", "MUSTERMANN", 240, 86),
            *below("GEBURTSNAME/NAME AT BIRTH/NOM DE NAISSANCE", "GABLER", 240, 146),
            *below("VORNAMEN/GIVEN NAMES/PRÉNOMS", given, 240, 206),
            *below("GEBURTSTAG/DATE OF BIRTH", "12.08.1983", 240, 266),
            *below("GÜLTIG BIS/DATE OF EXPIRY", "01.08.2031", 240, 386), box("123456", 720, 490)]


def nl_front(number: str = "SPECI2021") -> list[OcrLine]:
    return [box("KONINKRIJK DER NEDERLANDEN", 30, 16), box("IDENTITEITSKAART", 30, 46, 16),
            *below("NAAM/SURNAME", "DE BRUIJN", 240, 86), *below("VOORNAMEN/GIVEN NAMES", "WILLEKE LISELOTTE", 240, 146),
            *below("GEBOORTEDATUM/DATE OF BIRTH", "10 MAA/MAR 1965", 240, 206),
            *below("DOCUMENTNUMMER/DOCUMENT NO", number, 240, 326),
            *below("GELDIG TOT/DATE OF EXPIRY", "09 MAA/MAR 2031", 540, 326),
            *below("PERSOONSNUMMER/PERSONAL NO", "999999990", 240, 386)]


def it_front(number: str = "CA00000AA") -> list[OcrLine]:
    return [box("REPUBBLICA ITALIANA", 30, 16), box("CARTA DI IDENTITÀ / IDENTITY CARD", 30, 46, 16),
            box(number, 650, 20, 24), *below("COMUNE DI / MUNICIPALITY", "ROMA", 240, 86),
            *below("COGNOME / SURNAME", "ROSSI", 240, 146), *below("NOME / NAME", "BIANCA", 240, 206),
            *below("EMISSIONE / ISSUING", "01.08.2021", 240, 386), *below("SCADENZA / EXPIRY", "01.08.2032", 490, 386)]


def es_front(support: str = "BAA000589") -> list[OcrLine]:
    return [box("REINO DE ESPAÑA", 30, 16), box("DOCUMENTO NACIONAL DE IDENTIDAD", 30, 46, 16),
            *beside("DNI NUM", "99999999R", 520, 84), *below("APELLIDOS", "ESPAÑOLA ESPAÑOLA", 240, 130),
            *below("NOMBRE", "CARMEN", 240, 190), *below("FECHA DE NACIMIENTO", "01 01 1980", 520, 250),
            *beside("NUM SOPORT", support, 240, 320), *below("VÁLIDO HASTA", "01 01 2031", 240, 370)]


def hr_front(number: str = "112233445") -> list[OcrLine]:
    return [box("REPUBLIKA HRVATSKA / REPUBLIC OF CROATIA", 30, 16),
            box("OSOBNA ISKAZNICA / IDENTITY CARD", 30, 44, 16),
            *below("Broj osobne iskaznice / Document No.", number, 600, 78),
            *below("Prezime / Surname", "HORVAT", 240, 130),
            *below("Ime / Name", "IVANA", 240, 190), *below("Spol / Sex", "Ž/F", 240, 250),
            *below("Datum rođenja / Date of birth", "01. 01. 1990.", 240, 310),
            *below("Datum isteka / Date of expiry", "02. 08. 2031.", 240, 370)]


def cz_front(number: str = "000123456") -> list[OcrLine]:
    return [box("ČESKÁ REPUBLIKA / CZECH REPUBLIC", 30, 16), box("OBČANSKÝ PRŮKAZ / IDENTITY CARD", 30, 46, 16),
            *below("Příjmení / Surname", "NOVÁKOVÁ", 240, 86), *below("Jméno / Given names", "JANA", 240, 146),
            *below("Datum narození / Date of birth", "03.04.1985", 240, 266),
            *below("Číslo dokladu / Document No.", number, 240, 326),
            *below("Platnost do / Date of expiry", "17.09.2030", 540, 326)]


def us_passport_card(number: str = "C03005988") -> list[OcrLine]:
    return [box("THE UNITED STATES OF AMERICA", 240, 14), box("PASSPORT CARD", 240, 44),
            *below("Passport Card no.", number, 620, 78), *below("Surname", "TRAVELER", 240, 130),
            *below("Given Names", "HAPPY", 240, 190), *below("Date of Birth", "01 JAN 1981", 240, 310),
            *below("Issues On", "30 JUN 2009", 240, 370), *below("Expires On", "29 JUN 2029", 500, 370)]


def test_each_front_is_read_by_label_with_its_issuers_number_and_a_real_expiry_date() -> None:
    expected = {
        "fr": (fr_2021(), {"name": "DUBOIS Maëlys-Gaëlle Marie", "id_number": "X4RTBPFW4", "expiry_date": "2031-02-11"}),
        "de": (de_front(), {"name": "MUSTERMANN ERIKA", "id_number": "L01X00T47", "expiry_date": "2031-08-01"}),
        "nl": (nl_front(), {"name": "DE BRUIJN WILLEKE LISELOTTE", "id_number": "SPECI2021",
                            "expiry_date": "2031-03-09"}),
        "it": (it_front(), {"name": "ROSSI BIANCA", "id_number": "CA00000AA", "expiry_date": "2032-08-01"}),
        "es": (es_front(), {"name": "ESPAÑOLA ESPAÑOLA CARMEN", "id_number": "BAA000589",
                            "expiry_date": "2031-01-01"}),
        # "Ime/Name" is the given name (Croatian "ime"), dates as "DD. MM. YYYY."
        "hr": (hr_front(), {"name": "HORVAT IVANA", "id_number": "112233445", "expiry_date": "2031-08-02"}),
        "cz": (cz_front("0OO123456"), {"name": "NOVÁKOVÁ JANA", "id_number": "000123456",
                                      "expiry_date": "2030-09-17"}),
        "us": (us_passport_card(), {"name": "TRAVELER HAPPY", "id_number": "C03005988", "expiry_date": "2029-06-29"}),
    }
    for card, (lines, fields) in expected.items():
        reading = read_document(lines, TODAY)
        assert (card, reading.format, reading.doc_type) == (card, "national_front", "id_card")
        assert (card, reading.fields) == (card, fields)


def test_the_national_and_english_labels_name_their_fields() -> None:
    assert {t: label_kind(t) for t in ("NOM / Surname", "Prénoms / Given names", "N° du document / Document No",
                                       "Date d'expir. / Expiry date", "VORNAMEN/GIVEN NAMES", "GÜLTIG BIS",
                                       "NAAM/SURNAME", "GELDIG TOT/DATE OF EXPIRY", "DOCUMENTNUMMER",
                                       "COGNOME/SURNAME", "NOME/NAME", "SCADENZA/EXPIRY", "APELLIDOS", "NOMBRE",
                                       "NUM SOPORT", "VÁLIDO HASTA", "Prezime / Surname", "Ime / Name",
                                       "Datum isteka", "Broj osobne iskaznice", "Příjmení", "Jméno",
                                       "Číslo dokladu", "Platnost do", "Expires On")} == {
        "NOM / Surname": "surname", "Prénoms / Given names": "given", "N° du document / Document No": "number",
        "Date d'expir. / Expiry date": "expiry", "VORNAMEN/GIVEN NAMES": "given", "GÜLTIG BIS": "expiry",
        "NAAM/SURNAME": "surname", "GELDIG TOT/DATE OF EXPIRY": "expiry", "DOCUMENTNUMMER": "number",
        "COGNOME/SURNAME": "surname", "NOME/NAME": "given", "SCADENZA/EXPIRY": "expiry", "APELLIDOS": "surname",
        "NOMBRE": "given", "NUM SOPORT": "number", "VÁLIDO HASTA": "expiry", "Prezime / Surname": "surname",
        "Ime / Name": "given", "Datum isteka": "expiry", "Broj osobne iskaznice": "number", "Příjmení": "surname",
        "Jméno": "given", "Číslo dokladu": "number", "Platnost do": "expiry", "Expires On": "expiry"}
    # labels of other fields, and the alternate name, are no name labels
    assert [label_kind(t) for t in ("Nom d'usage / Alternate name", "GEBURTSNAME/NAME AT BIRTH", "SEXE / Sex",
                                    "LUOGO E DATA DI NASCITA", "DNI NUM", "Datum rođenja / Date of birth",
                                    "Datum narození / Date of birth")] == [None] * 7
    # a full-name label alone stays one ("Ime" names the given name only beside its "Name")
    assert [label_kind(t) for t in ("Name", "姓名/Name")] == ["name", "name"]


def test_a_value_beside_its_label_is_taken_and_a_later_fields_value_under_it_is_not() -> None:
    # "NUM SOPORT" has nothing under it but the next label and that label's date: its value is beside it
    printed = read_printed(es_front())
    assert printed.values["number"][0] == "BAA000589"
    assert printed.values["expiry"][0] == "01 01 2031"


def es_front_read_as(number_box: str, expiry_box: str) -> list[OcrLine]:
    """The Spanish front with its support number and expiry each read in one box with its label."""
    lines = [x for x in es_front() if x.text not in ("NUM SOPORT", "BAA000589", "VÁLIDO HASTA", "01 01 2031")]
    return [*lines, box(number_box, 240, 320), box(expiry_box, 240, 370)]


def test_a_value_read_in_one_box_with_its_label_is_split_from_it() -> None:
    # OCR reads a value printed close beside its label as one box: "NUM SOPORT BAA000589"
    reading = read_document(es_front_read_as("NUM SOPORT BAA000589", "VÁLIDO HASTA 01 01 2031"), TODAY)
    assert reading.format == "national_front"
    assert (reading.fields["id_number"], reading.fields["expiry_date"]) == ("BAA000589", "2031-01-01")
    # the longest label is cut off, not the shortest ("Document No", not "Document")
    assert read_printed([box("Document No L898902C3", 10, 10)]).values["number"][0] == "L898902C3"


def test_a_value_read_with_no_space_after_its_label_is_split_where_the_label_ends() -> None:
    # "NUM SOPORTGZL364434": "NUM SOPORTG" or "NUM SOPORTGZL" is nearly the label too, and "364434" has a
    # number's shape; the split is where the text before it is most like the label
    reading = read_document(es_front_read_as("NUM SOPORTGZL364434", "VÁLIDO HASTA15 04 2031"), TODAY)
    assert reading.format == "national_front"
    assert (reading.fields["id_number"], reading.fields["expiry_date"]) == ("GZL364434", "2031-04-15")
    # a tail without the value's shape (a number of 6+ characters, 3 of them digits) is no value
    assert read_printed([box("NUM SOPORTGZL36", 10, 10)]).values == {}


def test_a_field_number_or_a_stray_digit_in_a_label_box_is_no_value() -> None:
    # "(4b)" is the field's number on a licence, "12" no number: the value is still looked for by layout
    printed = read_printed([*below("Date of expiry (4b)", "01.02.2030", 10, 10), *below("Passport No. 12", "X1234567", 10, 80)])
    assert printed.values["expiry"][0] == "01.02.2030" and printed.values["number"][0] == "X1234567"
    # and a label without any such tail keeps its value under it
    assert read_printed(below("Document No", "L898902C3", 10, 10)).values["number"][0] == "L898902C3"


def test_half_a_name_is_no_name() -> None:
    lines = [x for x in fr_2021() if x.text != "Maëlys-Gaëlle, Marie"]
    reading = read_document(lines, TODAY)
    assert reading.format == "national_front"
    assert reading.fields["name"] is None and reading.states["name"].state == "unreadable"
    assert reading.fields["id_number"] == "X4RTBPFW4"


def test_a_number_without_its_issuers_shape_is_unreadable_never_stored() -> None:
    for lines in (fr_2021(number="X4RTBPFW"), nl_front(number="SPEC12021X"), es_front(support="BA000589")):
        reading = read_document(lines, TODAY)
        assert reading.fields["id_number"] is None and "number.shape" in reading.check_failures
    # the German and Italian numbers carry no label: a box of another shape is not taken for them
    for lines in (de_front(number="L01A00T47"), it_front(number="CA0000AA")):
        reading = read_document(lines, TODAY)
        assert reading.fields["id_number"] is None and reading.states["id_number"].state == "unreadable"


def test_two_boxes_of_the_unlabelled_numbers_shape_leave_it_unreadable() -> None:
    lines = [*de_front(), box("M01X00T48", 640, 60, 24)]
    assert read_document(lines, TODAY).fields["id_number"] is None


def test_an_impossible_expiry_date_is_unreadable() -> None:
    reading = read_document(fr_2021(expiry="31 02 2031"), TODAY)
    assert reading.fields["expiry_date"] is None and reading.states["expiry_date"].state == "unreadable"


def test_a_front_without_name_labels_is_left_to_the_printed_format() -> None:
    lines = [box("RÉPUBLIQUE FRANÇAISE", 230, 16), box("Carte valable jusqu'au : 01.02.2030", 30, 100)]
    assert read_document(lines, TODAY).format != "national_front"


def test_a_front_whose_title_was_not_read_does_not_take_six_digits_for_its_number() -> None:
    # Without its title the page is no issuer's front and the generic printed format reads it; the only
    # number-shaped box left is six digits (a card access number, as a date could be): no document number.
    lines = [x for x in de_front() if x.text not in ("BUNDESREPUBLIK DEUTSCHLAND", "PERSONALAUSWEIS", "L01X00T47")]
    reading = read_document(lines, TODAY)
    assert reading.format == "printed" and reading.states["id_number"].state == "unreadable"
    with_number = read_document([*lines, box("C2345678", 640, 20, 24)], TODAY)
    assert with_number.format == "printed" and with_number.fields["id_number"] == "C2345678"


def test_no_front_confidence_reaches_the_auto_accept_threshold() -> None:
    reading = read_document(de_front(), TODAY)
    assert all(s.confidence < 0.95 for s in reading.states.values())


def test_a_letter_the_issuers_numbers_never_use_is_read_as_the_digit_it_resembles() -> None:
    # German numbers have no O nor I, Dutch ones no O; a French number may hold any letter: kept as read
    assert read_document(de_front(number="L0IXO0T47"), TODAY).fields["id_number"] == "L01X00T47"
    assert read_document(nl_front(number="SPECI2O21"), TODAY).fields["id_number"] == "SPECI2021"
    assert read_document(fr_2021(number="X4RTBPFWO"), TODAY).fields["id_number"] == "X4RTBPFWO"


def alb_front(number: str = "367253746") -> list[OcrLine]:
    return [box("LETËRNJOFTIM ID", 30, 16), box("REPUBLIKA E SHQIPËRISË REPUBLIC OF ALBANIA", 260, 16),
            *below("mbiemri/surname", "Agani", 240, 86), *below("emri/given name", "Adnan", 240, 146),
            *below("shtetësia/nationality", "Shqiptare/Albanian", 240, 206),
            *below("nr. letërnjoftim/card no.", number, 600, 206),
            *below("datëlindja/date of birth", "20-11-1991", 240, 326),
            *below("data e skadimit/date of expiry", "13-04-2029", 600, 386),
            *below("nr. personal/personal no.", "J11120296E", 600, 446)]


def test_the_albanian_front_gives_its_card_number_not_the_personal_number() -> None:
    reading = read_document(alb_front(), TODAY)
    assert (reading.format, reading.issuer) == ("national_front", "ALB")
    assert reading.fields == {"name": "Agani Adnan", "id_number": "367253746", "expiry_date": "2029-04-13"}
    assert read_document(alb_front(number="36725374"), TODAY).fields["id_number"] is None  # not 9 digits


def test_an_issuers_front_has_an_evidence_class_of_its_own_and_an_unknown_layout_stays_printed() -> None:
    from pipeline.formats.national_front import ISSUER_FRONT_CHECK
    from pipeline.trust.table import evidence_class

    reading = read_document(de_front(), TODAY)
    assert ISSUER_FRONT_CHECK in reading.checks
    assert {f: evidence_class(f, reading.doc_type, reading.checks, reading.check_failures)
            for f in reading.fields} == {f: f"{f}/printed.issuer_front" for f in reading.fields}
    # the same labels under no issuer's title: a layout nobody measured, read by `printed`, class `printed`
    untitled = read_document(de_front()[2:], TODAY)
    assert untitled.format == "printed" and ISSUER_FRONT_CHECK not in untitled.checks
    assert evidence_class("name", untitled.doc_type, untitled.checks, untitled.check_failures) == "name/printed"
