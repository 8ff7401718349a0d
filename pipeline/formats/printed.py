"""Any other document: the printed zone alone, by labels and by shape, at heuristic confidence (no check
digits). Recognises every page, so it is registered last; its doc type comes from the page's words.
"""

from __future__ import annotations

import re

from pipeline.formats.dates import parse_printed_dates
from pipeline.formats.document_format import FormatDefaults
from pipeline.formats.lines import fold
from pipeline.formats.printed_zone import latest_date, printed_name, unlabelled_number
from pipeline.formats.reading import HEURISTIC, Builder, DocumentType, Page


class PrintedFormat(FormatDefaults):
    name = "printed"
    doc_types = ("passport", "id_card", "unknown")

    def find(self, page: Page) -> Page:
        return page

    def read(self, found: Page, page: Page, b: Builder) -> DocumentType:
        printed, lines, today = page.printed, page.lines, page.today
        name = printed_name(printed)
        if name is not None:
            b.present("name", " ".join(name[0].split()), name[1] * HEURISTIC)
        number = printed.values.get("number") or unlabelled_number(lines, printed)
        if number is not None:
            b.present("id_number", re.sub(r"\s+", "", number[0]), number[1] * HEURISTIC)
        expiry_label = printed.values.get("expiry")
        expiry_dates = parse_printed_dates(expiry_label[0], today=today) if expiry_label else []
        expiry = (expiry_dates[0].isoformat(), expiry_label[1]) if expiry_dates and expiry_label \
            else latest_date(lines, today)
        if expiry is not None:
            b.present("expiry_date", expiry[0], expiry[1] * HEURISTIC)
        return _doc_type_from_words(page.texts)


def _doc_type_from_words(texts: list[str]) -> DocumentType:
    words = fold(" ".join(texts))
    if re.search(r"\bPAS+(PORT|APORTE|EPORT)\b", words):
        return "passport"
    if re.search(r"\bIDENTI(TY|TE|DAD)\b|\bID CARD\b", words):
        return "id_card"
    return "unknown"


FORMAT = PrintedFormat()
