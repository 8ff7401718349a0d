"""What a personal name may look like, whatever zone or backend it was read from.

OCR debris from a machine-readable zone ("SG3GI9DECZOOSIOJANZO34") or a label read as a value must never
become a stored name: a name is letters (any script), with spaces, hyphens, apostrophes and the middle
dot of transliterated CJK names between them, and no digits; a period after an abbreviated word is allowed where
a model or a person wrote the name.
"""

from __future__ import annotations

import functools
import re
import unicodedata

_SEPARATORS = re.compile(r"[ \-'’·•]+")
_ABBREVIATION_MARK = re.compile(r"(?<=[^\W\d_])\.")  # a period right after a letter


def looks_like_name(text: str | None, *, abbreviations: bool = False) -> bool:
    """At least two letters, nothing but letters between separators, no separator at either end.

    `abbreviations`: a period may follow a letter (`ST. JOHN`, `GARCIA MA. CRISTINA`, `SMITH JR.`), as names are
    printed and as a person types them; for validation and corrections. The OCR readers keep it off: there a
    period next to a name is more often a speck than part of it.
    """
    if not text:
        return False
    folded = unicodedata.normalize("NFC", text.strip())
    if abbreviations:
        folded = _ABBREVIATION_MARK.sub(" ", folded).strip()
    parts = _SEPARATORS.split(folded)
    return sum(len(p) for p in parts) >= 2 and all(p and all(c.isalpha() or unicodedata.category(c) == "Mn" for c in p)
                                                   for p in parts)


# Traditional-looking characters that the General Standard Chinese Characters table (2013) keeps as standard
# characters in names, which OpenCC's Traditional-to-Simplified table maps to other characters: 乾 (qián, 干
# elsewhere), 於 (the surname Yū, 于 elsewhere).
_STANDARD_IN_NAMES = frozenset("乾於")


@functools.cache
def _t2s():  # noqa: ANN202
    import opencc

    return opencc.OpenCC("t2s")


def simplified(name: str) -> str:
    """A Chinese name in simplified characters, as PRC documents print it: each traditional character that
    OCR read (強 for 强) replaced by its simplified form from OpenCC's table, character by character (a name
    is no phrase: phrase rules would change characters by their neighbours), except `_STANDARD_IN_NAMES`."""
    converter = _t2s()
    out = []
    for c in name:
        s = converter.convert(c) if "\u3400" <= c <= "\u9fff" and c not in _STANDARD_IN_NAMES else c
        out.append(s if len(s) == 1 else c)
    return "".join(out)
