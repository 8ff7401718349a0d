"""Printed values as the card means them: what OCR reads around a value that is not part of it is removed
before the value is compared with a zone or stored.

A value box under a label often carries print that belongs to the layout, not to the value:
- quotation-like marks some issuers print around a surname (`„MÜLLER“`, `"SMITH"`, `«DUPONT»`);
- the field numbers of EU card layouts (`1. SMITH`, `2. ANNA`, `4a. 01.02.2020`);
- the tail of a label read into the value's box (`Nom: DUPONT`, `Surname / SMITH`).
Names lose each of them; a document number only marks, label words and field numbers followed by a space
(a number may begin with digits and a period would be part of it). Apostrophes inside a name (O'NEIL, D’ARCY)
are letters' company, not marks, and stay.
"""

from __future__ import annotations

import re
import unicodedata

# Double and single quotation marks of every script, primes, backticks and acute accents used as quotes.
QUOTE_MARKS = "\"'“”„‟«»‹›〝〞〟＂＇‘’‚‛`´′″"
_FIELD_NUMBER = re.compile(r"^\s*\d{1,2}[a-dA-D]?\s*[.,:)]\s*(?=\S)")
_FIELD_NUMBER_BEFORE_NUMBER = re.compile(r"^\s*\d{1,2}[a-dA-D]?[.:)]\s+(?=\S)")
# "N°" is always a label; "No", "Nr", "Num", "Numéro" only with a separator after them ("NO1234567" is a number).
_NUMBER_LABEL = re.compile(r"^\s*(?:N[°º]\s*[:.]?\s*|(?:No|Nr|Num|Numero|Número|Numéro)(?:\s*[.:]\s*|\s+))(?=\S)",
                           re.IGNORECASE)
# A comma between two words separates the given names some cards list ("Maëlys-Gaëlle, Marie"): a space.
_LIST_COMMA = re.compile(r"(?<=[^\W\d_]),\s*(?=[^\W\d_])")
_EDGE_PUNCTUATION = ",.;:/|\\-–—_*•·"
# Words of name labels (folded, lower case), in the languages the printed zone's labels are read in.
LABEL_WORDS = frozenset({
    "surname", "surnames", "name", "names", "given", "forename", "forenames", "primary", "secondary", "identifier",
    "apellido", "apellidos", "nombre", "nombres", "nom", "noms", "prenom", "prenoms", "usage", "mbiemri", "emri",
    "soyadi", "adi", "nazwisko", "imie", "imiona", "vorname", "vornamen", "nachname", "familienname", "cognome",
    "nome", "achternaam", "voornamen", "voornaam", "patronymic",
})


def _fold_word(word: str) -> str:
    decomposed = unicodedata.normalize("NFKD", word.lower())
    return "".join(c for c in decomposed if c.isalpha())


def strip_marks(text: str) -> str:
    """Quotation-like marks removed where they open or close a word; kept between two letters (O'NEIL)."""
    words = []
    for word in text.split():
        word = word.strip(QUOTE_MARKS)
        if word:
            words.append(word)
    return " ".join(words)


def _is_label_word(token: str, *, strict: bool) -> bool:
    """A label word: one of `LABEL_WORDS` (a variant separator or colon glued to it allowed). `strict`: only
    when it cannot be a value, i.e. written in mixed or lower case (values are printed in capitals) or closed
    by a colon or slash."""
    core = token.rstrip(":/|")
    closed = core != token
    folded = _fold_word(core)
    if not folded or folded not in LABEL_WORDS:
        return False
    return not strict or closed or core != core.upper()


def _without_label_words(words: list[str]) -> list[str]:
    """Leading and trailing label words dropped (see `_is_label_word`); a label word followed by a separator
    token ("Nom / DUPONT") goes with it; so do label words in capitals joined by separators ("NOM / SURNAME
    DUPONT": the label's language variants)."""
    end = 0
    while end + 1 < len(words) and _is_label_word(words[end], strict=False) and words[end + 1] in "/|:":
        end += 2
        if end < len(words) and _is_label_word(words[end], strict=False):
            end += 1
    words = words[end:]
    while words and (_is_label_word(words[0], strict=True) or words[0] in "/|:"):
        words = words[1:]
    while words and (_is_label_word(words[-1], strict=True) or words[-1] in "/|:"):
        words = words[:-1]
    return words


def clean_name(text: str) -> str:
    """A printed name value without quotation marks, a leading field number or label words around it, single
    spaced, the commas that list given names as spaces; "" when nothing of a value is left."""
    value = strip_marks(unicodedata.normalize("NFC", text).replace("/", " / ").replace("|", " | "))
    value = _FIELD_NUMBER.sub("", value)
    words = _without_label_words(value.split())
    value = " ".join(w.strip(QUOTE_MARKS) for w in words)
    value = _LIST_COMMA.sub(" ", value)
    return " ".join(value.strip(_EDGE_PUNCTUATION + " ").split())


def clean_number(text: str) -> str:
    """A printed document number without quotation marks, a leading field number (`5. `) or number label
    (`N° `, `No. `), and without spaces; "" when nothing is left."""
    value = strip_marks(unicodedata.normalize("NFKC", text))
    value = _FIELD_NUMBER_BEFORE_NUMBER.sub("", value)
    value = _NUMBER_LABEL.sub("", value)
    return re.sub(r"\s+", "", value).strip(_EDGE_PUNCTUATION)
