"""Fronts of national identity cards that carry no machine-readable zone on that side (the zone is on the
back): the French card of 2021, the German Personalausweis, the Dutch identity card, the Italian CIE and the
Spanish DNI. Each issuer is recognised by its title words and read by its labels (`printed_zone`); what this
module adds is what is known of each issuer: where its document number stands (labelled or not) and the shape
that number must have, so a box of another shape is never stored as the number.

Shapes (upper case, no spaces):
- FRA (2021 model): 9 letters and digits;
- DEU: 9 characters of the alphabet the Bundesdruckerei uses (digits and C F G H J K L M N P R T V W X Y Z,
  no vowels nor letters that look like digits, so an O or I read is a 0 or 1), printed top right without a
  label;
- NLD: 2 letters, 6 letters or digits, 1 digit (the letter O is never used, so an O read is a 0);
- ITA (CIE 3.0): "C" + a letter, 5 digits, 2 letters, printed top right without a label;
- ESP: the support number (3 letters + 6 digits, "NUM SOPORT"), the one the back's zone carries as the
  document number.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from pipeline.fields.lines import OcrLine, fold


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
)

# Any of the issuers' document numbers (the format's `number_shape`); each issuer's own is checked as well.
NUMBER_SHAPE = re.compile("|".join(f"(?:{issuer.number.pattern})" for issuer in ISSUERS))


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
