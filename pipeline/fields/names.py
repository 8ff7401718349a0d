"""What a personal name may look like, whatever zone or backend it was read from.

OCR debris from a machine-readable zone ("SG3GI9DECZOOSIOJANZO34") or a label read as a value must never
become a stored name: a name is letters (any script), with spaces, hyphens, apostrophes and the middle
dot of transliterated CJK names between them, and no digits.
"""

from __future__ import annotations

import re
import unicodedata

_SEPARATORS = re.compile(r"[ \-'’·•]+")


def looks_like_name(text: str | None) -> bool:
    """At least two letters, nothing but letters between separators, no separator at either end."""
    if not text:
        return False
    folded = unicodedata.normalize("NFC", text.strip())
    parts = _SEPARATORS.split(folded)
    return sum(len(p) for p in parts) >= 2 and all(p and all(c.isalpha() or unicodedata.category(c) == "Mn" for c in p)
                                                   for p in parts)
