"""What a personal name may look like, whatever zone or backend it was read from.

OCR debris from a machine-readable zone ("SG3GI9DECZOOSIOJANZO34") or a label read as a value must never
become a stored name: a name is letters (any script), with spaces, hyphens, apostrophes and the middle
dot of transliterated CJK names between them, and no digits; a period after an abbreviated word is allowed where
a model or a person wrote the name.
"""

from __future__ import annotations

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
