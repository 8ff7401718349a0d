"""Fronts of national identity cards that carry no machine-readable zone on that side (the zone is on the
back, or, on the Albanian card, nowhere): the French card of 2021, the German Personalausweis, the Dutch identity
card, the Italian CIE, the Spanish DNI, the Albanian, Croatian and Czech cards. Each issuer is recognised by its
title words and read by its labels (`printed_zone`); what this module adds is what is known of each issuer: where
its document number stands (labelled or not) and the shape that number must have, so a box of another shape is
never stored as the number.

Shapes (upper case, no spaces):
- FRA (2021 model): 9 letters and digits;
- DEU: 9 characters of the alphabet the Bundesdruckerei uses (digits and C F G H J K L M N P R T V W X Y Z,
  no vowels nor letters that look like digits, so an O or I read is a 0 or 1), printed top right without a
  label;
- NLD: 2 letters, 6 letters or digits, 1 digit (the letter O is never used, so an O read is a 0);
- ITA (CIE 3.0): "C" + a letter, 5 digits, 2 letters, printed top right without a label;
- ESP: the support number (3 letters + 6 digits, "NUM SOPORT"), the one the back's zone carries as the
  document number;
- ALB (identity card, "letërnjoftim"): the 9-digit card number ("nr. letërnjoftim/card no."), not the personal
  number of 10 letters and digits printed beside it;
- HRV (osobna iskaznica, 2021 model): the 9-digit document number ("Broj osobne iskaznice/Document No.");
- CZE (občanský průkaz, 2021 model): the 9-digit document number ("Číslo dokladu/Document No.").
  Both print digits only, so an O or I read there is a 0 or 1;
- USA (passport card, whose zone is on the back): "C" and 8 digits ("Passport Card no.").

As a registered format (`FORMAT`): the front of a national identity card whose zone is on the back (FR 2021, DE, NL,
IT, ES, HR, CZ, the US passport card) or that has none (ALB): recognised by its issuer's title words and at least
one name label, read by label (surname and given names together, the number in its issuer's shape, the expiry a real
date). No check digit vouches for these values; what a reading has is `ISSUER_FRONT_CHECK`: the issuer's own layout
was recognised and its number has the issuer's shape. Its evidence class, `printed.issuer_front`, is calibrated on
generated fronts of these issuers (the Albanian one on the MIDV-2020 template, `synth.render_template`); a page no
issuer's title names is read by `printed`, whose class stays below the auto-accept threshold (a layout nobody has
measured).

Registered before `printed`, which would read the same page without the issuer's number shape.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from pipeline.formats.dates import parse_printed_dates
from pipeline.formats.document_format import FormatDefaults
from pipeline.formats.lines import OcrLine, fold
from pipeline.formats.printed_zone import printed_name
from pipeline.formats.reading import HEURISTIC, Builder, DocumentType, Page


@dataclass(frozen=True, slots=True)
class Issuer:
    """One issuer's card front: `code` (ICAO), `title` (words only its front prints, folded), `number` (the
    document number's shape) and whether the number is printed without a label (`unlabelled_number`)."""

    code: str
    title: re.Pattern[str]
    number: re.Pattern[str]
    unlabelled_number: bool = False
    look_alikes: str = ""  # letters the issuer's numbers never use, each followed by the digit it is read for

    def normalised(self, text: str) -> str:
        """`text` upper case without spaces, each letter the issuer never prints in a number read as the digit
        it resembles (the letter O as 0 where no number has an O): the only reading its alphabet allows."""
        table = str.maketrans(self.look_alikes[0::2], self.look_alikes[1::2])
        return re.sub(r"\s+", "", text.upper()).translate(table)


_DE_ALPHABET = "0-9CFGHJKLMNPRTVWXYZ"

ISSUERS: tuple[Issuer, ...] = (
    Issuer("FRA", re.compile(r"\bCARTE NATIONALE D ?IDENTITE\b|\bREPUBLIQUE FRANCAISE\b"),
           re.compile(r"(?=[A-Z]*\d)[0-9A-Z]{9}")),
    Issuer("DEU", re.compile(r"\bPERSONALAUSWEIS\b|\bBUNDESREPUBLIK DEUTSCHLAND\b"),
           re.compile(rf"(?=[A-Z]*\d)[CFGHJKLMNPRTVWXYZ][{_DE_ALPHABET}]{{8}}"), unlabelled_number=True,
           look_alikes="O0I1"),
    Issuer("NLD", re.compile(r"\bIDENTITEITSKAART\b|\bKONINKRIJK DER NEDERLANDEN\b"),
           re.compile(r"[A-NP-Z]{2}[0-9A-NP-Z]{6}\d"), look_alikes="O0"),
    Issuer("ITA", re.compile(r"\bCARTA DI? ?IDENTITA\b|\bREPUBBLICA ITALIANA\b"),
           re.compile(r"C[A-Z]\d{5}[A-Z]{2}"), unlabelled_number=True),
    Issuer("ESP", re.compile(r"\bDOCUMENTO NACIONAL DE IDENTIDAD\b|\bREINO DE ESPANA\b"),
           re.compile(r"[A-Z]{3}\d{6}")),
    Issuer("ALB", re.compile(r"\bREPUBLIKA E SHQIPERISE\b|\bLETERNJOFTIM\b|\bREPUBLIC OF ALBANIA\b"),
           re.compile(r"\d{9}")),
    Issuer("HRV", re.compile(r"\bREPUBLIKA HRVATSKA\b|\bOSOBNA ISKAZNICA\b|\bREPUBLIC OF CROATIA\b"),
           re.compile(r"\d{9}"), look_alikes="O0I1"),
    Issuer("CZE", re.compile(r"\bCESKA REPUBLIKA\b|\bOBCANSKY PRUKAZ\b|\bCZECH REPUBLIC\b"),
           re.compile(r"\d{9}"), look_alikes="O0I1"),
    Issuer("USA", re.compile(r"\bPASSPORT CARD\b"), re.compile(r"C\d{8}"), look_alikes="O0I1"),
)

# Any of the issuers' document numbers (the format's `number_shape`); each issuer's own is checked as well.
NUMBER_SHAPE = re.compile("|".join(f"(?:{issuer.number.pattern})" for issuer in ISSUERS))


# passed on every reading of this format: the issuer's title and a name label were found, and a number stored has
# the issuer's shape (`number.shape` fails otherwise); its fields' evidence class is `ISSUER_FRONT_EVIDENCE`
ISSUER_FRONT_CHECK = "printed.issuer_front"
ISSUER_FRONT_EVIDENCE = "printed.issuer_front"


def issuer_of(texts: Sequence[str]) -> Issuer | None:
    """The issuer whose title words the page prints; None when none does, or when two issuers' do (a page
    that shows two cards is no one issuer's front)."""
    words = fold(" ".join(texts))
    found = [issuer for issuer in ISSUERS if issuer.title.search(words)]
    return found[0] if len(found) == 1 else None


def number_in_boxes(issuer: Issuer, lines: Sequence[OcrLine]) -> tuple[str, float] | None:
    """The one box whose text (without spaces) has the issuer's number shape, as (number, box score); None
    when no box or more than one distinct value has it (then the page does not say which is the number)."""
    hits: dict[str, float] = {}
    for line in lines:
        text = issuer.normalised(line.text)
        if issuer.number.fullmatch(text):
            hits[text] = max(hits.get(text, 0.0), line.score)
    return next(iter(hits.items())) if len(hits) == 1 else None


class NationalFrontFormat(FormatDefaults):
    name = "national_front"
    doc_types = ("id_card",)
    number_shape = NUMBER_SHAPE
    may_carry_mrz = False  # the zone is on the back: an MRZ re-read of a front finds nothing to read

    def find(self, page: Page) -> Issuer | None:
        """The issuer, when the page prints its title and labels a surname or given names (a back, which
        prints the title but no name label, is left to the other formats)."""
        if not {"surname", "given"} & page.printed.values.keys():
            return None
        return issuer_of(page.texts)

    def read(self, found: Issuer, page: Page, b: Builder) -> DocumentType:
        b.issuer = found.code  # the country whose title words the front prints
        b.checks.append(ISSUER_FRONT_CHECK)
        self._name(page, b)
        self._number(found, page, b)
        self._expiry(page, b)
        return "id_card"

    def evidence_source(self, field: str, doc_type: str | None, checks: list[str],
                        failures: list[str]) -> str | None:
        return ISSUER_FRONT_EVIDENCE if ISSUER_FRONT_CHECK in checks else None

    @staticmethod
    def _name(page: Page, b: Builder) -> None:
        """Surname and given names, both read (half a name is no name: `printed_name`)."""
        name = printed_name(page.printed)
        if name is None:
            return b.unreadable("name")
        b.present("name", " ".join(name[0].split()), name[1] * HEURISTIC)

    @staticmethod
    def _number(issuer: Issuer, page: Page, b: Builder) -> None:
        """The labelled number, or where the issuer prints it without a label the one box of its shape; a
        value of another shape is unreadable (`number.shape`), never stored."""
        labelled = page.printed.values.get("number")
        number = labelled if labelled is not None or not issuer.unlabelled_number \
            else number_in_boxes(issuer, page.lines)
        if number is None:
            return b.unreadable("id_number")
        value = issuer.normalised(number[0])
        if not issuer.number.fullmatch(value):
            b.failures.append("number.shape")
            return b.unreadable("id_number")
        b.present("id_number", value, number[1] * HEURISTIC)

    @staticmethod
    def _expiry(page: Page, b: Builder) -> None:
        """The first real date in the expiry label's value; unreadable without one."""
        label = page.printed.values.get("expiry")
        dates = parse_printed_dates(label[0], today=page.today) if label else []
        if not dates:
            return b.unreadable("expiry_date")
        b.present("expiry_date", dates[0].isoformat(), label[1] * HEURISTIC)


FORMAT = NationalFrontFormat()
