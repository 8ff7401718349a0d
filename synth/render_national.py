"""Fronts of national identity cards whose machine-readable zone is on the back: the French card of 2021, the
German Personalausweis, the Dutch identity card, the Italian CIE, the Spanish DNI, the Croatian and Czech cards
and the US passport card; the UK photocard driving licence's front (numbered fields, no zone); the front of the PRC
Foreign Permanent Resident ID Card (2023 model), which has no zone at all; and both sides of the French card of
1988-2021, whose own 2x36 zone carries no expiry (the back prints it). Laid out after the published
specimens (titles, bilingual labels, values under or beside their labels, the number where the issuer prints
it). Fake people and numbers of each issuer's shape; the ground truth is what the front shows: name
("SURNAME GIVEN NAMES"), document number, expiry date.

Every renderer is `(person, variant) -> Rendered`, a pure function of its arguments (856x540, CR80).
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from PIL import Image, ImageDraw

from synth.identities import add_years, cn_check_char, mrz_check_digit, mrz_field, printed_date, random_date
from synth.render import CARD_H, CARD_W, PAGE_H, PAGE_W, Rendered, _background, _Canvas, _photo_box, font

_LABEL = (80, 80, 95)
_VALUE = (15, 15, 15)
_DE_ALPHABET = "0123456789CFGHJKLMNPRTVWXYZ"
_LETTERS = "ABCDEFGHJKLMNPRSTUVWXYZ"
_NL_MONTHS = ("JAN", "FEB", "MAA", "APR", "MEI", "JUN", "JUL", "AUG", "SEP", "OKT", "NOV", "DEC")
_EN_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DNI_LETTERS = "TRWAGMYFPDXBNJZSQVHLCKE"

SURNAMES = {
    "FRA": ("MARTIN", "DUBOIS", "LEFÈVRE", "BERNARD", "MOREAU", "GIRARD", "FONTAINE", "ROUSSEAU"),
    "DEU": ("MÜLLER", "SCHMIDT", "SCHNEIDER", "FISCHER", "WEBER", "BECKER", "HOFFMANN", "KRÜGER"),
    "NLD": ("DE JONG", "JANSEN", "DE VRIES", "VAN DEN BERG", "BAKKER", "VISSER", "SMIT", "MEIJER"),
    "ITA": ("ROSSI", "RUSSO", "FERRARI", "ESPOSITO", "BIANCHI", "ROMANO", "COLOMBO", "RICCI"),
    "ESP": ("GARCÍA LÓPEZ", "MARTÍNEZ RUIZ", "SÁNCHEZ GIL", "PÉREZ MORENO", "GÓMEZ DÍAZ", "LÓPEZ NAVARRO"),
    "HRV": ("HORVAT", "KOVAČEVIĆ", "BABIĆ", "MARIĆ", "JURIĆ", "NOVAK", "KNEŽEVIĆ", "VUKOVIĆ"),
    "CZE": ("NOVÁK", "SVOBODOVÁ", "DVOŘÁK", "ČERNÁ", "PROCHÁZKA", "KUČEROVÁ", "VESELÝ", "HORÁKOVÁ"),
}
GIVEN = {
    "FRA": ("MARIE", "HÉLÈNE", "JEAN", "LUC", "CAMILLE", "ANNE-SOPHIE", "PIERRE", "CHLOÉ"),
    "DEU": ("ANNA", "LUKAS", "JÜRGEN", "KATHARINA", "FELIX", "SOPHIE", "MAXIMILIAN", "LENA"),
    "NLD": ("JAN", "SANNE", "PIETER", "EMMA", "DAAN", "FLEUR", "THIJS", "LOTTE"),
    "ITA": ("GIULIA", "MARCO", "FRANCESCA", "LUCA", "CHIARA", "MATTEO", "SARA", "ANDREA"),
    "ESP": ("MARÍA", "JOSÉ", "LUCÍA", "JAVIER", "CARMEN", "PABLO", "ELENA", "ANTONIO"),
    "HRV": ("IVAN", "ANA", "MARKO", "PETRA", "LUKA", "MAJA", "JOSIP", "IVANA"),
    "CZE": ("JAN", "TEREZA", "JIŘÍ", "ELIŠKA", "PETR", "LUCIE", "TOMÁŠ", "KATEŘINA"),
}
PLACES = {"FRA": ("PARIS", "LYON", "NANTES"), "DEU": ("BERLIN", "KÖLN", "MÜNCHEN"),
          "NLD": ("UTRECHT", "DELFT", "LEIDEN"), "ITA": ("ROMA", "TORINO", "BARI"),
          "ESP": ("MADRID", "SEVILLA", "BILBAO"), "HRV": ("ZAGREB", "SPLIT", "RIJEKA"),
          "CZE": ("PRAHA", "BRNO", "OSTRAVA")}


@dataclass(frozen=True)
class NationalPerson:
    """A card holder of one issuer (`state`): names in capitals, the document number in the issuer's shape."""

    state: str
    surname: str
    given_names: tuple[str, ...]
    sex: str
    birth: dt.date
    issued: dt.date
    expiry: dt.date
    number: str
    place: str
    personal: str = ""  # a second number the front prints (DNI number, BSN, CAN)

    @property
    def full_name(self) -> str:
        return f"{self.surname} {' '.join(self.given_names)}"


def dni_number(rng: random.Random) -> str:
    """A Spanish DNI number: 8 digits and their mod-23 check letter."""
    digits = f"{rng.randrange(10_000_000, 99_999_999):08d}"
    return digits + _DNI_LETTERS[int(digits) % 23]


def _number(rng: random.Random, state: str) -> str:
    digit = rng.choice("0123456789")
    if state == "FRA":
        body = "".join(rng.choice(_LETTERS + "0123456789") for _ in range(8))
        return body[:4] + digit + body[5:] + rng.choice(_LETTERS + "0123456789")
    if state == "DEU":
        return rng.choice("CFGHJKLMNPRTVWXYZ") + "".join(rng.choice(_DE_ALPHABET) for _ in range(6)) + digit \
            + rng.choice(_DE_ALPHABET)
    if state == "NLD":
        return "".join(rng.choice(_LETTERS) for _ in range(2)) \
            + "".join(rng.choice(_LETTERS + "0123456789") for _ in range(6)) + digit
    if state == "ITA":
        return "C" + rng.choice(_LETTERS) + f"{rng.randrange(100000):05d}" + rng.choice(_LETTERS) + rng.choice(_LETTERS)
    if state in ("HRV", "CZE"):
        return f"{rng.randrange(10**9):09d}"
    return "".join(rng.choice(_LETTERS) for _ in range(3)) + f"{rng.randrange(1_000_000):06d}"


def random_national_person(rng: random.Random, state: str, today: dt.date = dt.date(2026, 1, 1)) -> NationalPerson:
    """A random holder of a card of `state` (FRA, DEU, NLD, ITA, ESP, HRV, CZE), valid 10 years from its issue."""
    given = tuple(rng.sample(GIVEN[state], rng.choice((1, 1, 2))))
    expiry = random_date(rng, today + dt.timedelta(days=60), add_years(today, 10))
    personal = {"ESP": dni_number(rng), "NLD": f"{rng.randrange(10**8, 10**9)}"}.get(state,
                                                                                     f"{rng.randrange(10**6):06d}")
    return NationalPerson(state, rng.choice(SURNAMES[state]), given, rng.choice("MF"),
                          random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31)),
                          add_years(expiry, -10) + dt.timedelta(days=1), expiry, _number(rng, state),
                          rng.choice(PLACES[state]), personal)


def _dotted(d: dt.date) -> str:
    return f"{d.day:02d}.{d.month:02d}.{d.year}"


def _spaced(d: dt.date) -> str:
    return f"{d.day:02d} {d.month:02d} {d.year}"


def _croatian(d: dt.date) -> str:
    return f"{d.day:02d}. {d.month:02d}. {d.year}."


def _dutch(d: dt.date) -> str:
    return f"{d.day:02d} {_NL_MONTHS[d.month - 1]}/{_EN_MONTHS[d.month - 1]} {d.year}"


def _card(base, tint, variant: int) -> _Canvas:
    c = _Canvas(_background(CARD_W, CARD_H, base, tint, variant))
    c.draw.rounded_rectangle((0, 0, CARD_W - 1, CARD_H - 1), radius=28, outline=(200, 205, 210), width=2)
    return c


def _below(c: _Canvas, x: int, y: int, label: str, value: str, vsize: int = 26, lsize: int = 15) -> None:
    """A label with its value under it (in the CJK font where either holds a Chinese character)."""
    cjk = any("\u4e00" <= ch <= "\u9fff" for ch in label + value)
    c.text((x, y), label, "cjk" if cjk else "sans", lsize, _LABEL)
    c.text((x, y + lsize + 6), value, "cjk" if cjk else "sans_bold", vsize, _VALUE)


def _beside(c: _Canvas, x: int, y: int, label: str, value: str, vsize: int = 26, lsize: int = 15) -> None:
    """A label with its value to its right on the same line."""
    end = c.text((x, y + (vsize - lsize) // 2 + 2), label, "sans", lsize, _LABEL)
    c.text((end + 14, y), value, "sans_bold", vsize, _VALUE)


def _done(c: _Canvas, p: NationalPerson, kind: str) -> Rendered:
    return Rendered(c.img, "id_card", p.full_name, p.number, p.expiry.isoformat(), "landscape", texts=c.texts,
                    kind=kind)


def fr_front_2021(p: NationalPerson, variant: int = 0) -> Rendered:
    """Carte nationale d'identité (2021): given names listed with commas, number and expiry at the bottom."""
    c = _card((238, 242, 248), (176, 196, 226), variant)
    c.text((230, 16), "RÉPUBLIQUE FRANÇAISE", "sans_bold", 24, (30, 50, 110))
    c.text((230, 48), "CARTE NATIONALE D'IDENTITÉ / IDENTITY CARD", "sans", 18, (30, 50, 110))
    _photo_box(c, (28, 90, 208, 330))
    x = 240
    _below(c, x, 90, "NOM / Surname", p.surname)
    _below(c, x, 150, "Prénoms / Given names", ", ".join(p.given_names))
    _below(c, x, 210, "SEXE / Sex", p.sex)
    _below(c, x + 120, 210, "NATIONALITÉ / Nationality", "FRA")
    _below(c, x + 360, 210, "DATE DE NAISS. / Date of birth", _spaced(p.birth))
    _below(c, x, 270, "LIEU DE NAISSANCE / Place of birth", p.place)
    _below(c, x, 330, "Nom d'usage / Alternate name", "-")
    _below(c, x, 400, "N° DU DOCUMENT / Document No", p.number)
    _below(c, x + 300, 400, "DATE D'EXPIR. / Expiry date", _spaced(p.expiry))
    c.text((700, 490), p.personal, "sans", 18, _LABEL)
    return _done(c, p, "fr_front")


def de_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """Personalausweis: the number top right without a label, trilingual labels, the access number (CAN)
    bottom right."""
    c = _card((244, 240, 236), (214, 190, 180), variant + 1)
    c.text((30, 18), "BUNDESREPUBLIK DEUTSCHLAND", "sans_bold", 22, (40, 40, 40))
    c.text((30, 48), "PERSONALAUSWEIS · IDENTITY CARD", "sans", 17, (40, 40, 40))
    c.text((640, 20), p.number, "sans_bold", 26, (20, 20, 20))
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 86, "Name/Surname/Nom", p.surname)
    _below(c, x, 146, "Geburtsname/Name at birth/Nom de naissance", p.surname)
    _below(c, x, 206, "Vornamen/Given names/Prénoms", " ".join(p.given_names))
    _below(c, x, 266, "Geburtstag/Date of birth/Date de naissance", _dotted(p.birth))
    _below(c, x + 330, 266, "Staatsangehörigkeit/Nationality", "DEUTSCH")
    _below(c, x, 326, "Geburtsort/Place of birth/Lieu de naissance", p.place)
    _below(c, x, 386, "Gültig bis/Date of expiry/Date d'expiration", _dotted(p.expiry))
    c.text((720, 490), p.personal, "sans", 20, (40, 40, 40))
    return _done(c, p, "de_front")


def nl_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """Dutch identity card: labelled document number, Dutch/English months, the BSN (personal number)."""
    c = _card((240, 238, 246), (200, 186, 222), variant + 2)
    c.text((30, 16), "KONINKRIJK DER NEDERLANDEN", "sans_bold", 22, (40, 30, 90))
    c.text((30, 46), "IDENTITEITSKAART · IDENTITY CARD", "sans", 17, (40, 30, 90))
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 86, "Naam/Surname", p.surname)
    _below(c, x, 146, "Voornamen/Given names", " ".join(p.given_names))
    _below(c, x, 206, "Geboortedatum/Date of birth", _dutch(p.birth))
    _below(c, x + 330, 206, "Geslacht/Sex", "V" if p.sex == "F" else "M")
    _below(c, x, 266, "Geboorteplaats/Place of birth", p.place)
    _below(c, x, 326, "Documentnummer/Document no", p.number)
    _below(c, x + 300, 326, "Geldig tot/Date of expiry", _dutch(p.expiry))
    _below(c, x, 386, "Persoonsnummer/Personal no", p.personal)
    return _done(c, p, "nl_front")


def it_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """Carta d'identità elettronica: the number top right without a label, issue and expiry dates side by
    side."""
    c = _card((242, 246, 244), (186, 214, 204), variant + 3)
    c.text((30, 16), "REPUBBLICA ITALIANA", "sans_bold", 22, (30, 70, 60))
    c.text((30, 46), "CARTA DI IDENTITÀ / IDENTITY CARD", "sans", 17, (30, 70, 60))
    c.text((650, 20), p.number, "sans_bold", 26, (170, 30, 30))
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 86, "COMUNE DI / MUNICIPALITY", p.place)
    _below(c, x, 146, "COGNOME / SURNAME", p.surname)
    _below(c, x, 206, "NOME / NAME", " ".join(p.given_names))
    _below(c, x, 266, "LUOGO E DATA DI NASCITA / PLACE AND DATE OF BIRTH", f"{p.place} {_dotted(p.birth)}")
    _below(c, x, 326, "SESSO / SEX", p.sex)
    _below(c, x + 150, 326, "CITTADINANZA / NATIONALITY", "ITA")
    _below(c, x, 386, "EMISSIONE / ISSUING", _dotted(p.issued))
    _below(c, x + 250, 386, "SCADENZA / EXPIRY", _dotted(p.expiry))
    return _done(c, p, "it_front")


def es_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """DNI: surnames and name under their labels, the DNI number and the support number beside theirs (the
    support number is the document number, the one the back's zone carries)."""
    c = _card((246, 242, 234), (222, 204, 170), variant + 4)
    c.text((30, 16), "REINO DE ESPAÑA", "sans_bold", 22, (120, 40, 30))
    c.text((30, 46), "DOCUMENTO NACIONAL DE IDENTIDAD", "sans", 17, (120, 40, 30))
    _beside(c, 520, 84, "DNI NUM", p.personal)
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 130, "APELLIDOS", p.surname)
    _below(c, x, 190, "NOMBRE", " ".join(p.given_names))
    _below(c, x, 250, "SEXO", p.sex)
    _below(c, x + 100, 250, "NACIONALIDAD", "ESP")
    _below(c, x + 280, 250, "FECHA DE NACIMIENTO", _spaced(p.birth))
    _beside(c, x, 320, "NUM SOPORT", p.number)
    _below(c, x, 370, "VÁLIDO HASTA", _spaced(p.expiry))
    return _done(c, p, "es_front")


def hr_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """Osobna iskaznica (2021): Croatian/English labels, the surname over the given names ("Ime/Name"), the
    document number top right under its label, dates as "DD. MM. YYYY."."""
    c = _card((240, 244, 248), (180, 200, 226), variant + 6)
    c.text((30, 16), "REPUBLIKA HRVATSKA / REPUBLIC OF CROATIA", "sans_bold", 20, (30, 40, 110))
    c.text((30, 44), "OSOBNA ISKAZNICA / IDENTITY CARD", "sans", 17, (30, 40, 110))
    _below(c, 600, 78, "Broj osobne iskaznice / Document No.", p.number, vsize=24, lsize=13)
    _photo_box(c, (30, 96, 210, 336))
    x = 240
    _below(c, x, 130, "Prezime / Surname", p.surname)
    _below(c, x, 190, "Ime / Name", " ".join(p.given_names))
    _below(c, x, 250, "Spol / Sex", "Ž/F" if p.sex == "F" else "M/M")
    _below(c, x + 150, 250, "Državljanstvo / Nationality", "HRV")
    _below(c, x, 310, "Datum rođenja / Date of birth", _croatian(p.birth))
    _below(c, x, 370, "Datum isteka / Date of expiry", _croatian(p.expiry))
    return _done(c, p, "hr_front")


def cz_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """Občanský průkaz (2021): Czech/English labels, the document number under "Číslo dokladu/Document No.",
    the expiry under "Platnost do/Date of expiry"."""
    c = _card((246, 244, 240), (200, 210, 228), variant + 7)
    c.text((30, 16), "ČESKÁ REPUBLIKA / CZECH REPUBLIC", "sans_bold", 21, (30, 50, 100))
    c.text((30, 46), "OBČANSKÝ PRŮKAZ / IDENTITY CARD", "sans", 17, (30, 50, 100))
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 86, "Příjmení / Surname", p.surname)
    _below(c, x, 146, "Jméno / Given names", " ".join(p.given_names))
    _below(c, x, 206, "Pohlaví / Sex", "Ž/F" if p.sex == "F" else "M/M")
    _below(c, x + 150, 206, "Státní občanství / Nationality", "CZE")
    _below(c, x, 266, "Datum narození / Date of birth", _dotted(p.birth))
    _below(c, x, 326, "Číslo dokladu / Document No.", p.number)
    _below(c, x + 300, 326, "Platnost do / Date of expiry", _dotted(p.expiry))
    _below(c, x, 386, "Místo narození / Place of birth", p.place)
    return _done(c, p, "cz_front")


_US_SURNAMES = ("JOHNSON", "GARCIA", "MILLER", "DAVIS", "RODRIGUEZ", "WILSON", "ANDERSON", "THOMPSON")
_US_GIVEN = ("MICHAEL", "JESSICA", "ROBERT", "ASHLEY", "DAVID", "JENNIFER", "JOHN", "AMANDA")
_US_STATES = ("NEW YORK, U.S.A.", "TEXAS, U.S.A.", "OHIO, U.S.A.", "CALIFORNIA, U.S.A.")


def random_us_card_holder(rng: random.Random, today: dt.date = dt.date(2026, 1, 1)) -> NationalPerson:
    """A US passport card holder: a 10-year card numbered "C" and 8 digits."""
    given = tuple(rng.sample(_US_GIVEN, rng.choice((1, 2))))
    expiry = random_date(rng, today + dt.timedelta(days=60), add_years(today, 10))
    return NationalPerson("USA", rng.choice(_US_SURNAMES), given, rng.choice("MF"),
                          random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31)),
                          add_years(expiry, -10) + dt.timedelta(days=1), expiry, f"C{rng.randrange(10**8):08d}",
                          rng.choice(_US_STATES))


def us_passport_card(p: NationalPerson, variant: int = 0) -> Rendered:
    """The US passport card: "PASSPORT CARD" under the country, English labels, dates as "05 MAY 2029", the card
    number under "Passport Card no." top right."""
    c = _card((238, 244, 250), (170, 196, 224), variant + 9)
    c.text((240, 14), "THE UNITED STATES OF AMERICA", "sans_bold", 22, (20, 40, 100))
    c.text((240, 44), "PASSPORT CARD", "sans_bold", 20, (150, 30, 40))
    _below(c, 620, 78, "Passport Card no.", p.number, vsize=24, lsize=14)
    _photo_box(c, (30, 90, 210, 330))
    x = 240
    _below(c, x, 130, "Surname", p.surname)
    _below(c, x, 190, "Given Names", " ".join(p.given_names))
    _below(c, x, 250, "Nationality", "USA")
    _below(c, x + 200, 250, "Sex", p.sex)
    _below(c, x, 310, "Date of Birth", printed_date(p.birth))
    _below(c, x + 260, 310, "Place of Birth", p.place)
    _below(c, x, 370, "Issues On", printed_date(p.issued))
    _below(c, x + 260, 370, "Expires On", printed_date(p.expiry))
    return _done(c, p, "us_passport_card")


_UK_SURNAMES = ("MORGAN", "JONES", "TAYLOR", "O'BRIEN", "WILLIAMS", "DAVIES", "EVANS", "LEE", "PATEL", "SMITH-HUGHES")
_UK_GIVEN = ("SARAH", "JAMES", "OLIVIA", "THOMAS", "EMILY", "HARRY", "CHLOE", "DANIEL", "GRACE", "OWEN")
_UK_TOWNS = (("EDINBURGH", "EH1 9GP"), ("CARDIFF", "CF10 1AA"), ("LEEDS", "LS1 4AP"), ("BRISTOL", "BS1 5TR"))


def uk_licence_number(surname: str, given: tuple[str, ...], birth: dt.date, sex: str, rng: random.Random) -> str:
    """A DVLA licence number: the surname's first five letters (9-padded), the birth date (decade digit, month,
    plus 50 for a woman, day, year digit), the first two initials (9 for none), a digit (usually 9) and two
    check characters (random here: their algorithm is not published)."""
    letters = "".join(c for c in surname if c.isalpha())[:5].ljust(5, "9")
    initials = "".join(name[0] for name in given)[:2].ljust(2, "9")
    month = birth.month + (50 if sex == "F" else 0)
    return (f"{letters}{birth.year // 10 % 10}{month:02d}{birth.day:02d}{birth.year % 10}{initials}"
            f"{rng.choice('9999998')}{rng.choice(_LETTERS)}{rng.choice(_LETTERS)}")


def random_uk_licence_holder(rng: random.Random, today: dt.date = dt.date(2026, 1, 1)) -> NationalPerson:
    """A UK photocard licence holder: one or two given names, a 10-year card, the DVLA number, the town."""
    given = tuple(rng.sample(_UK_GIVEN, rng.choice((1, 2, 2))))
    surname, sex = rng.choice(_UK_SURNAMES), rng.choice("MF")
    birth = random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31))
    expiry = random_date(rng, today + dt.timedelta(days=60), add_years(today, 10))
    town = rng.choice(_UK_TOWNS)
    return NationalPerson("GBR", surname, given, sex, birth, add_years(expiry, -10) + dt.timedelta(days=1), expiry,
                          uk_licence_number(surname, given, birth, sex, rng), f"{town[0]} {town[1]}",
                          f"{rng.randrange(1, 99):02d}")


def uk_licence_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """The UK photocard driving licence: numbered fields, not labels (1. surname, 2. given names, 3. birth date
    and place, 4a. issue date, 4c. authority, 4b. expiry, 5. the number and its issue number, 8. address, 9.
    categories), each field number small before its value."""
    c = _card((246, 228, 232), (230, 180, 196), variant + 8)
    c.draw.rectangle((28, 18, 98, 70), fill=(30, 50, 130))
    c.text((44, 30), "UK", "sans_bold", 26, (240, 240, 240))
    c.text((230, 14), "DRIVING LICENCE", "sans_bold", 32, (40, 40, 60))
    c.text((560, 26), "UNITED KINGDOM", "sans", 18, (40, 40, 60))
    _photo_box(c, (30, 96, 210, 336))
    x, gap = 240, 50

    def numbered(y: int, number: str, value: str, dx: int = 0) -> None:
        end = c.text((x + dx, y + 7), number, "sans", 15, _LABEL)
        c.text((end + 10, y), value, "sans_bold", 23, _VALUE)

    numbered(90, "1.", p.surname)
    numbered(90 + gap, "2.", " ".join(p.given_names))
    numbered(90 + 2 * gap, "3.", f"{_dotted(p.birth)} UNITED KINGDOM")
    numbered(90 + 3 * gap, "4a.", _dotted(p.issued))
    numbered(90 + 3 * gap, "4c.", "DVLA", dx=260)
    numbered(90 + 4 * gap, "4b.", _dotted(p.expiry))
    numbered(90 + 5 * gap, "5.", f"{p.number} {p.personal}")
    numbered(90 + 6 * gap, "8.", f"14 HIGH STREET {p.place}")
    c.text((30, 490), "9. AM/A/B1/B/f/k/l/n/p/q", "sans", 18, _LABEL)
    return Rendered(c.img, "driving_licence", p.full_name, p.number, p.expiry.isoformat(), "landscape",
                    texts=c.texts, kind="uk_licence_front")


# Nationalities of permanent residents: ISO 3166-1 alpha-3, numeric (the 2023 number's digits 4-6), names.
_PR_NATIONS = (("CAN", "124", "加拿大", ("SMITH", "BROWN", "TREMBLAY"), ("JOHN", "EMILY", "OLIVIER")),
               ("USA", "840", "美国", ("JOHNSON", "MILLER", "DAVIS"), ("MICHAEL", "SARAH", "DAVID")),
               ("DEU", "276", "德国", ("MUELLER", "WEBER", "SCHULZ"), ("ANNA", "FELIX", "LENA")),
               ("FRA", "250", "法国", ("MARTIN", "DUBOIS", "MOREAU"), ("CAMILLE", "PIERRE", "CHLOE")),
               ("KOR", "410", "韩国", ("KIM", "PARK", "LEE"), ("MINJUN", "SEOYEON", "JIHO")))
_PR_PROVINCES = ("11", "31", "44", "32", "33", "51")  # Beijing, Shanghai, Guangdong, Jiangsu, Zhejiang, Sichuan


def random_pr_person(rng: random.Random, today: dt.date = dt.date(2026, 1, 1)) -> NationalPerson:
    """A random holder of a 2023-model permanent resident card: 18-character number ('9', province,
    nationality numeric, birth date, sequence, MOD 11-2 check), valid 10 years (5 under 18)."""
    code, numeric, _, surnames, given = rng.choice(_PR_NATIONS)
    birth = random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31))
    expiry = random_date(rng, today + dt.timedelta(days=60), add_years(today, 10))
    body = f"9{rng.choice(_PR_PROVINCES)}{numeric}{birth:%Y%m%d}{rng.randrange(1000):03d}"
    return NationalPerson(code, rng.choice(surnames), (rng.choice(given),), rng.choice("MF"), birth,
                          add_years(expiry, -10) + dt.timedelta(days=1), expiry, body + cn_check_char(body), "")


def cn_pr_front(p: NationalPerson, variant: int = 0) -> Rendered:
    """外国人永久居留身份证 (2023): bilingual title, the Latin name as "SURNAME, GIVEN" after 姓名/Name, sex,
    birth date, nationality, the validity period "YYYY.MM.DD-YYYY.MM.DD" and the 18-character card number.
    The name on the record is the Latin one, without its comma."""
    c = _card((246, 240, 232), (216, 196, 160), variant + 5)
    c.text((240, 16), "中华人民共和国外国人永久居留身份证", "cjk", 26, (150, 40, 30))
    c.text((240, 52), "FOREIGN PERMANENT RESIDENT ID CARD", "sans", 17, (150, 40, 30))
    _photo_box(c, (30, 90, 210, 330))
    nation = next(n for n in _PR_NATIONS if n[0] == p.state)
    x = 240
    _below(c, x, 90, "姓名/Name", f"{p.surname}, {' '.join(p.given_names)}")
    _below(c, x, 150, "性别/Sex", ("男/M" if p.sex == "M" else "女/F"))
    _below(c, x + 160, 150, "出生日期/Date of Birth", f"{p.birth:%Y.%m.%d}")
    _below(c, x, 210, "国籍/Nationality", f"{nation[2]}/{p.state}")
    _below(c, x, 270, "有效期限/Period of Validity", f"{p.issued:%Y.%m.%d}-{p.expiry:%Y.%m.%d}")
    _below(c, x, 340, "证件号码/Card No.", p.number, vsize=28)
    return Rendered(c.img, "cn_permanent_residence", p.full_name, p.number, p.expiry.isoformat(), "landscape",
                    texts=c.texts, kind="cn_pr_front")


_FR_DEPARTMENTS = (("750", "PREFECTURE DE POLICE"), ("920", "PREFECTURE DES HAUTS-DE-SEINE"),
                   ("690", "PREFECTURE DU RHONE"), ("440", "PREFECTURE DE LA LOIRE-ATLANTIQUE"),
                   ("130", "PREFECTURE DES BOUCHES-DU-RHONE"))
_FR_STREETS = ("RUE DE LA PAIX", "AVENUE DES TILLEULS", "BOULEVARD VOLTAIRE", "RUE DU MOULIN", "PLACE DE L'EGLISE")


def random_fr_1988_person(rng: random.Random) -> NationalPerson:
    """A holder of the 1988-2021 French card: issued 2012-2021, valid ten years from its issue (until the day
    before), the number the issue's YYMM, the office (département and a digit) and a sequence; `personal` holds
    the office's département. Given names without hyphens (the zone writes a hyphen as a filler)."""
    given = tuple(rng.sample([g for g in GIVEN["FRA"] if "-" not in g], rng.choice((1, 1, 2))))
    if len("<<".join(given)) > 14:  # the zone's field holds 14 characters
        given = given[:1]
    issued = random_date(rng, dt.date(2012, 1, 1), dt.date(2021, 8, 1))
    expiry = fr_1988_expiry(issued)
    department = rng.randrange(len(_FR_DEPARTMENTS))
    number = f"{issued:%y%m}{_FR_DEPARTMENTS[department][0][:2]}{rng.randrange(10)}{rng.randrange(100000):05d}"
    return NationalPerson("FRA", rng.choice(SURNAMES["FRA"]), given, rng.choice("MF"),
                          random_date(rng, dt.date(1950, 1, 1), dt.date(2005, 12, 31)), issued, expiry, number,
                          rng.choice(PLACES["FRA"]), str(department))


def fr_1988_expiry(issued: dt.date) -> dt.date:
    """The day before the card's tenth anniversary; a 29 February's falls on 1 March, so it ends on 28 February."""
    if (issued.month, issued.day) == (2, 29):
        return dt.date(issued.year + 10, 2, 28)
    return issued.replace(year=issued.year + 10) - dt.timedelta(days=1)


def fr_1988_zone(p: NationalPerson) -> tuple[str, str]:
    """The card's 2x36 zone (`pipeline.formats.french_id`): surname and office on line 1; number, its check
    digit, given names, birth date and its check digit, sex and the composite check digit on line 2."""
    line1 = "IDFRA" + mrz_field(p.surname, 25) + f"{_FR_DEPARTMENTS[int(p.personal)][0]}{p.number[6]}01"
    body = p.number + mrz_check_digit(p.number) + mrz_field("<<".join(p.given_names), 14)
    body += f"{p.birth:%y%m%d}" + mrz_check_digit(f"{p.birth:%y%m%d}") + p.sex
    return line1, body + mrz_check_digit(line1 + body)


def fr_cni_1988(p: NationalPerson, variant: int = 0, stamped: bool = False) -> Rendered:
    """The 1988-2021 French card, front above back on a white page (a copy of both sides, as desks ask for):
    the front's labelled fields and its 2x36 zone; the back's address, "Carte valable jusqu'au", "délivrée le"
    and the issuing prefecture. The expiry is only on the back; no check digit covers it. `stamped`: the
    authority's round stamp is struck over the "délivrée le" date, as on many real backs, so the expiry is read
    without the issue date that vouches for it."""
    front = _card((236, 238, 246), (196, 206, 226), variant + 2)
    front.text((250, 18), "RÉPUBLIQUE FRANÇAISE", "sans_bold", 24, (30, 50, 110))
    front.text((250, 52), f"CARTE NATIONALE D'IDENTITÉ N° : {p.number}", "sans_bold", 19, (30, 50, 110))
    _photo_box(front, (28, 90, 218, 330))
    _beside(front, 250, 96, "Nom :", p.surname, 24)
    _beside(front, 250, 140, "Prénom(s) :", ", ".join(p.given_names), 24)
    _beside(front, 250, 184, "Sexe :", p.sex, 22)
    _beside(front, 400, 184, "Né(e) le :", _dotted(p.birth), 22)
    _beside(front, 250, 228, "à :", p.place, 22)
    _beside(front, 250, 272, "Taille :", f"1,{60 + int(p.number[-2:]) % 35}m", 22)
    front.text((250, 320), "Signature du titulaire :", "sans", 15, _LABEL)
    zone = fr_1988_zone(p)
    front.mrz(zone, 420, 34, 52)
    back = _card((240, 242, 246), (206, 214, 230), variant + 3)
    street = _FR_STREETS[int(p.number[-1]) % len(_FR_STREETS)]
    _beside(back, 40, 40, "Adresse :", f"{int(p.number[-3:]) % 90 + 1} {street}", 22)
    back.text((170, 76), f"{p.place}", "sans_bold", 22, _VALUE)
    _beside(back, 40, 150, "Carte valable jusqu'au :", _dotted(p.expiry), 24)
    _beside(back, 40, 200, "délivrée le :", _dotted(p.issued), 24)
    _beside(back, 40, 250, "par :", _FR_DEPARTMENTS[int(p.personal)][1], 20)
    back.text((520, 330), "Signature de l'autorité", "sans", 15, _LABEL)
    if stamped:
        _stamp(back, (205 + 10 * (variant % 3), 222), int(p.number[-2:]))
    page = Image.new("RGB", (PAGE_W, PAGE_H), (255, 255, 255))
    x = (PAGE_W - CARD_W) // 2
    page.paste(front.img, (x, 320))
    page.paste(back.img, (x, 320 + CARD_H + 160))
    return Rendered(page, "id_card", p.full_name, p.number, p.expiry.isoformat(), "portrait",
                    mrz=zone, texts=front.texts + back.texts, kind="fr_cni_1988")


def _stamp(c: _Canvas, centre: tuple[int, int], seed: int) -> None:
    """An ink stamp: two rings, the office's words round them and a heavy bar across, struck at `centre`."""
    layer = Image.new("RGBA", c.img.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    ink = ((40, 50, 150, 235), (110, 40, 120, 230), (30, 30, 40, 225))[seed % 3]
    x, y = centre
    for r, w in ((40, 4), (27, 2)):
        draw.ellipse((x - r, y - r, x + r, y + r), outline=ink, width=w)
    draw.rectangle((x - 70, y - 12, x + 70, y + 12), fill=ink)
    words = font("sans_bold", 8)
    for i, ch in enumerate("PRÉFECTURE * RÉPUBLIQUE *"):
        a = math.radians(i * 360 / 25 - 90)
        draw.text((x + 33 * math.cos(a) - 3, y + 33 * math.sin(a) - 5), ch, font=words, fill=ink)
    c.img.paste(Image.alpha_composite(c.img.convert("RGBA"), layer).convert("RGB"))


Holder = Callable[[random.Random], NationalPerson]
Renderer = Callable[[NationalPerson, int], Rendered]

# kind -> (random holder, renderer): the fronts, and the French 1988 card's two sides on one page
NATIONAL_FRONTS: dict[str, tuple[Holder, Renderer]] = {
    "fr_front": (partial(random_national_person, state="FRA"), fr_front_2021),
    "de_front": (partial(random_national_person, state="DEU"), de_front),
    "nl_front": (partial(random_national_person, state="NLD"), nl_front),
    "it_front": (partial(random_national_person, state="ITA"), it_front),
    "es_front": (partial(random_national_person, state="ESP"), es_front),
    "hr_front": (partial(random_national_person, state="HRV"), hr_front),
    "cz_front": (partial(random_national_person, state="CZE"), cz_front),
    "uk_licence_front": (random_uk_licence_holder, uk_licence_front),
    "us_passport_card": (random_us_card_holder, us_passport_card),
    "cn_pr_front": (random_pr_person, cn_pr_front),
    "fr_cni_1988": (random_fr_1988_person, fr_cni_1988),
}
# Tuning kinds: the same cards in a capture made in quantity for the calibration table
TUNING_FRONTS: dict[str, tuple[Holder, Renderer]] = {
    "fr_cni_1988_stamped": (random_fr_1988_person, partial(fr_cni_1988, stamped=True)),
}


def render_national(kind: str, rng: random.Random, variant: int = 0) -> tuple[Rendered, NationalPerson]:
    """A random card of `kind` (one of `NATIONAL_FRONTS`: a front, or the French 1988 card's two sides) and its
    holder."""
    holder, render = NATIONAL_FRONTS[kind] if kind in NATIONAL_FRONTS else TUNING_FRONTS[kind]
    person = holder(rng)
    return render(person, variant), person
