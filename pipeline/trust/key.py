"""Which calibration table scores a reading: the backend kind, its model id and its prompt version.

What a model answers, and how often it is right, changes with each of the three, so a table is fitted for one
key and a reading carries the key of what read it (`Extraction.table_key`; None: the embedded OCR's).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

OCR_BACKEND = "ocr"  # the embedded backend's registered name (`pipeline.extract.registry.OCR`)


@dataclass(frozen=True, slots=True)
class TableKey:
    """What a table was fitted for: the backend kind, its model id and the prompt version (None: no prompt)."""

    backend: str
    model: str
    prompt: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TableKey:
        return cls(str(data["backend"]), str(data["model"]), data.get("prompt"))

    def as_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "model": self.model, "prompt": self.prompt}

    @property
    def label(self) -> str:
        return f"{self.backend}/{self.model}/{self.prompt or '-'}"

    def file_name(self) -> str:
        """A file name for this key: readable, and unique by a hash (model ids hold `/` and `:`)."""
        readable = re.sub(r"[^A-Za-z0-9._-]+", "_", self.label)[:80]
        digest = hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{readable}-{digest}.json"


@cache
def ocr_model_id() -> str:
    """The embedded OCR's model id: the RapidOCR release, whose wheel ships the PP-OCR models."""
    from importlib.metadata import version

    return f"rapidocr-{version('rapidocr')}-ppocr"


def ocr_key() -> TableKey:
    """The key of the embedded OCR's table (what a table file without a `key` is)."""
    return TableKey(OCR_BACKEND, ocr_model_id(), None)
