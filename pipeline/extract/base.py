"""The protocol every extraction backend implements.

Backends know nothing about Parquet or Prefect: they take prepared pages and return, for each page in the
same order, an `Extraction` or a `Failure` (stage `request` or `parse`). They never raise for one bad page.

A backend whose answers wait for a second reading on this machine's CPU (a VLM answer's fields read again by
the embedded OCR) may also offer `extract_deferring`: the same, except that such a page comes back `Unfinished`
as soon as its answer is in. The engine finishes those on workers of its own, so a request slot is never held
while the CPU reads; `extract` finishes them itself (`finished`).

A backend that sends the page as an image may also offer `pack(page) -> page`: the engine calls it on the
preparation thread, right after a page is prepared, and the backend returns the page as it will send it (its
JPEG in `sent_jpeg`, the pixels dropped: what reads the page again decodes that JPEG). A page waiting for a
request slot or a second reading then holds a tenth of the memory, and its encoding is done where the CPU work
already is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, Sequence

from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage


class ExtractionBackend(Protocol):
    name: str

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        """One result per input, in input order."""
        ...

    async def aclose(self) -> None:
        """Release connections, servers or models."""
        ...


@dataclass(frozen=True, slots=True)
class Unfinished:
    """A page whose answer is in and whose second reading is still to run: `finish()` runs it and returns the
    scored extraction (a bug in it is this page's `internal_error` failure, never an exception)."""

    ref: DocumentRef
    finish: Callable[[], Awaitable[Extraction | Failure]]


async def finished(results: Sequence[Extraction | Failure | Unfinished]) -> list[Extraction | Failure]:
    """`results` with every `Unfinished` page finished (concurrently), in order."""
    async def one(result: Extraction | Failure | Unfinished) -> Extraction | Failure:
        return await result.finish() if isinstance(result, Unfinished) else result

    return list(await asyncio.gather(*(one(r) for r in results)))
