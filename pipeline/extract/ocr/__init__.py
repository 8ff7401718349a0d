"""The embedded OCR backend: RapidOCR stages, page reading and every targeted second pass."""
