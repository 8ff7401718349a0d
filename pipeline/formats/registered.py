"""The document formats, registered once, in reading order (`document_format.Registry` explains the order).

Everything that depends on the kind of document asks `FORMATS`: `read_document`, validation (number
checksums, "long-term" validity, fatal checks), calibration (evidence classes) and the OCR backend (MRZ
re-read, early stop). The schema's `doc_type` enum and the prompts' list of types are kept equal to
`FORMATS.doc_types()` by a test.

A new format is one module here (a `DocumentFormat`: `FormatDefaults` or, with a machine-readable zone,
`zone.ZoneFormat` give the defaults), its line below, and its tests. A new doc type must also be offered to
the models: the schema's enum and a new prompt version (prompts are versioned, never edited in place).
"""

from __future__ import annotations

from pipeline.formats.document_format import DocumentFormat, FormatDefaults, NumberCheck, Registry
from pipeline.formats import (
    cn_id,
    cn_permanent_residence,
    driving_licence,
    french_id,
    icao,
    licence_front,
    national_front,
    printed,
)
from pipeline.formats.zone import NAME_EXTENDED_CHECK, ZoneFields, ZoneFormat

FORMATS = Registry([
    icao.FORMAT,
    french_id.FORMAT,
    driving_licence.FORMAT,
    cn_permanent_residence.FORMAT,
    cn_id.FORMAT,
    licence_front.FORMAT,
    national_front.FORMAT,
    printed.FORMAT,
])

__all__ = ["FORMATS", "NAME_EXTENDED_CHECK", "DocumentFormat", "FormatDefaults", "NumberCheck", "Registry",
           "ZoneFields", "ZoneFormat"]
