"""The run engine: one outcome per item, a bug contained to its document, and bounded memory on a long stream.

The backends here implement idflow's own `ExtractionBackend` protocol (no SDK is stood in for): one raises for a
chosen document, one holds every request until the test releases it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage, Reason, Record, Skipped, SkipReason
from pipeline.extract.base import Unfinished, finished
from pipeline.ingest.discover import sha256_file
from pipeline.run.engine import Engine
from pipeline.settings import Settings

FIELDS = {"doc_type": "passport", "name": "DOE JANE", "id_number": None, "expiry_date": None,
          "orientation": "landscape"}


def _pages(folder: Path, n: int) -> list[DocumentRef]:
    folder.mkdir(parents=True, exist_ok=True)
    refs = []
    for i in range(n):
        path = folder / f"page{i}.png"
        pixels = np.full((192, 320, 3), 255, np.uint8)
        pixels[40 + i % 100: 60 + i % 100, 20:300] = 0  # one dark bar: distinct content per page
        Image.fromarray(pixels).save(path)
        refs.append(DocumentRef(path=path, rel_path=path.name, sha256=sha256_file(path)))
    return refs


class RaisingBackend:
    """Answers every page, except that it raises (a bug) on the page named `bad`."""

    name = "ocr"

    def __init__(self, bad: str) -> None:
        self.bad = bad

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        if batch[0].ref.rel_path == self.bad:
            raise ZeroDivisionError("a bug in a backend, passport L898902C3")
        return [Extraction(ref=p.ref, fields=dict(FIELDS), backend=self.name, model="m") for p in batch]

    async def aclose(self) -> None:
        return None


class HeldBackend:
    """Holds every request until `release` is set; `full` is set once `expected` requests are in flight."""

    name = "ocr"

    def __init__(self, expected: int) -> None:
        self.expected, self.in_flight, self.peak = expected, 0, 0
        self.full, self.release = asyncio.Event(), asyncio.Event()

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        if self.in_flight >= self.expected:
            self.full.set()
        await self.release.wait()
        self.in_flight -= 1
        return [Extraction(ref=p.ref, fields=dict(FIELDS), backend=self.name, model="m") for p in batch]

    async def aclose(self) -> None:
        return None


def test_a_bug_fails_one_document_and_every_item_gets_one_outcome(tmp_path: Path) -> None:
    refs = _pages(tmp_path / "in", 6)
    skip = Skipped("notes/.hidden", SkipReason.HIDDEN)
    ingest_failure = Failure("x.txt", None, None, "ingest", Reason.UNSUPPORTED_TYPE, "text")

    async def run() -> list:
        async with Engine(Settings(concurrency=3), RaisingBackend(bad="page2.png"), prepare_workers=2) as engine:
            return [o async for o in engine.run([refs[0], skip, *refs[1:], ingest_failure])]

    outcomes = asyncio.run(run())
    assert len(outcomes) == 8
    assert skip in outcomes and ingest_failure in outcomes
    failures = [o for o in outcomes if isinstance(o, Failure) and o is not ingest_failure]
    assert [(f.rel_path, f.stage, f.reason) for f in failures] == [("page2.png", "internal", Reason.INTERNAL_ERROR)]
    assert "ZeroDivisionError" in failures[0].detail and "L898902C3" not in failures[0].detail
    records = [o for o in outcomes if isinstance(o, Record)]
    assert sorted(r.extraction.ref.rel_path for r in records) == [f"page{i}.png" for i in (0, 1, 3, 4, 5)]
    assert all(r.prepared.pixels is None and r.prepared.full_pixels is None for r in records)


def test_a_long_stream_is_pulled_only_as_fast_as_it_is_served(tmp_path: Path) -> None:
    """Back-pressure: while every extractor waits on the endpoint, the engine reads a bounded number of items
    from the folder walk, whatever its length."""
    refs = _pages(tmp_path / "in", 40)
    concurrency, preparers = 4, 2
    pulled = 0
    # in extraction + waiting for an extractor + being prepared + queued for a preparer + one in the feeder's hand
    bound = concurrency + concurrency + preparers + preparers + 1

    def walk() -> Iterator[DocumentRef]:
        nonlocal pulled
        for ref in refs:
            pulled += 1
            yield ref

    async def run() -> tuple[int, int, int]:
        backend = HeldBackend(expected=concurrency)
        async with Engine(Settings(concurrency=concurrency), backend, prepare_workers=preparers) as engine:
            stream = engine.run(walk())
            first = asyncio.ensure_future(stream.__anext__())
            await backend.full.wait()
            # The preparers fill the queues, then block on them: the walk is read up to the bound and no further.
            await asyncio.wait_for(_until(lambda: pulled >= bound), timeout=120)
            for _ in range(50):
                await asyncio.sleep(0)
            held = pulled
            backend.release.set()
            outcomes = [await first] + [o async for o in stream]
        return held, len(outcomes), backend.peak

    held, finished, peak = asyncio.run(run())
    assert held == bound < len(refs)
    assert finished == len(refs) and peak == concurrency


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for a condition that worker threads make true (checked between event-loop turns)."""
    while not condition():
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("workers", [1, 3])
def test_outcomes_do_not_depend_on_the_pool_sizes(tmp_path: Path, workers: int) -> None:
    refs = _pages(tmp_path / "in", 5)

    async def run() -> list:
        async with Engine(Settings(concurrency=workers), RaisingBackend(bad=""), prepare_workers=workers) as engine:
            return [o async for o in engine.run(refs)]

    outcomes = asyncio.run(run())
    assert sorted(o.extraction.ref.key for o in outcomes) == sorted(r.key for r in refs)


class DeferringBackend:
    """Answers every page at once, as `Unfinished`: its second reading waits until the test releases it, and
    counts how many requests were answered meanwhile."""

    name = "openai"

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.requests = 0
        self.all_asked = asyncio.Event()  # set once `expected` requests were answered
        self.release = asyncio.Event()
        self.finished = 0

    async def extract_deferring(self, batch: Sequence[PreparedImage]) -> list[Unfinished]:
        out = []
        for page in batch:
            self.requests += 1
            if self.requests == self.expected:
                self.all_asked.set()

            async def finish(page: PreparedImage = page) -> Extraction:
                await self.release.wait()
                self.finished += 1
                return Extraction(ref=page.ref, fields=dict(FIELDS), backend=self.name, model="m")
            out.append(Unfinished(page.ref, finish))
        return out

    async def extract(self, batch: Sequence[PreparedImage]) -> list[Extraction | Failure]:
        return await finished(await self.extract_deferring(batch))

    async def aclose(self) -> None:
        return None


def test_requests_go_on_while_second_readings_wait_and_every_page_is_finished(tmp_path: Path) -> None:
    """With one extractor, the next requests are sent while earlier pages wait for their second reading (up to
    the bound: `concurrency` queued plus `concurrency` being finished), and then every page is accounted for."""
    refs = _pages(tmp_path / "in", 3)
    backend = DeferringBackend(len(refs))

    async def go() -> list:
        outcomes = []
        async with Engine(Settings(concurrency=1), backend, prepare_workers=1) as engine:
            async def release_when_all_asked() -> None:
                await backend.all_asked.wait()
                assert backend.finished == 0  # every request was sent before any second reading ended
                backend.release.set()
            releaser = asyncio.create_task(release_when_all_asked())
            async with asyncio.timeout(60):  # the extractor waiting on a second reading would never get here
                outcomes = [o async for o in engine.run(refs)]
            await releaser
        return outcomes

    outcomes = asyncio.run(go())
    assert len(outcomes) == len(refs) and all(isinstance(o, Record) for o in outcomes)
    assert backend.finished == len(refs)
