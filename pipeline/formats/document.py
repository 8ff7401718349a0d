"""Document reading: OCR lines of one page -> document type, the three record fields and their evidence.

The registered document formats (`pipeline.formats`) decide: a machine-readable zone (check digits:
ICAO 9303, the 1988-2021 French ID card, EU driving licences) beats the printed visual zone, which only
cross-checks it; a PRC ID number (checksum) is read from the portrait side and the expiry from the emblem
side; any other page is read from its printed zone by labels (low confidence, no check digits).
"""

from __future__ import annotations

from datetime import date
from typing import Sequence

from pipeline.formats.lines import OcrLine, zone_boxes_of
from pipeline.formats.reading import DocumentReading, DocumentType, Page
from pipeline.formats.registered import FORMATS, NAME_EXTENDED_CHECK

__all__ = ["NAME_EXTENDED_CHECK", "DocumentReading", "DocumentType", "OcrLine", "read_document", "zone_boxes_of"]


def read_document(lines: Sequence[OcrLine], today: date) -> DocumentReading:
    """Read one page's OCR lines into document type, fields, per-field states and checks, by the format
    that recognises the page."""
    return FORMATS.read(Page.of(lines, today))
