"""The protocol every extraction backend implements.

Backends know nothing about Parquet or Prefect: they take prepared pages and return, for each page in the
same order, an `Extraction` or a `Failure` (stage `request` or `parse`). They never raise for one bad page.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from pipeline.datamodel import Extraction, Failure, PreparedImage


class ExtractionBackend(Protocol):
    name: str

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        """One result per input, in input order."""
        ...

    async def aclose(self) -> None:
        """Release connections, servers or models."""
        ...
