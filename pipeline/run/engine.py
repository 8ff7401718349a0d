"""The one run loop: a stream of discovered items in, one typed outcome per item out.

Every entry point (the `extract-folder` flow, the failure-queue retry, `idflow eval`, batch export, the Dask
worker, the benchmarks) runs documents through `Engine.run`, so there is one concurrency policy and one place
where a document's errors are contained.

Why a pipeline of worker pools rather than `gather` over a batch (the olmOCR dispatch): preparation is CPU work and
extraction is mostly waiting on an endpoint, so they get separate pools connected by bounded queues. Preparers keep
at most `concurrency` prepared pages waiting for an extractor (back-pressure: memory stays flat however large
the folder), and `concurrency` extractors keep that many requests in flight whenever pages are ready. A page whose
answer waits for a second reading on this machine's CPU (`backends.base.Unfinished`) is handed to `concurrency`
finishers of its own, through a queue of at most `concurrency` pages, so the extractor sends the next request at
once; only when the CPU falls that far behind do the extractors wait (back-pressure: memory stays flat). A document
never takes a pool down: any exception in any stage becomes an `internal_error` failure for that document alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import os
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Any, TypeVar

from pipeline.datamodel import DocumentRef, Extraction, Failure, PreparedImage, Reason, Record, Skipped
from pipeline.extract.base import ExtractionBackend, Unfinished
from pipeline.extract.registry import find_spec
from pipeline.masking import redact
from pipeline.memory import return_freed_memory
from pipeline.prepare import prepare_page
from pipeline.prepare.isolated import prepare_isolated
from pipeline.review.thumbnails import RunThumbnails
from pipeline.settings import PrepareSettings, Settings
from pipeline.store.crash_journal import CrashJournal
from pipeline.trust.table import Trust
from pipeline.validate import validate

Item = DocumentRef | Skipped | Failure
Outcome = Record | Failure | Skipped
# Wraps one extractor's whole life: the flow passes a hold on the cross-run request limit (one slot each).
RequestSlot = Callable[[], AbstractAsyncContextManager[Any]]

_T = TypeVar("_T")
_DONE = object()  # end of a queue


def _reads_full_pixels(backend: ExtractionBackend) -> bool:
    """Whether the backend's kind reads `PreparedImage.full_pixels` (the embedded OCR, alone or inside hybrid).
    For the others a run prepares pages without it, so the up to 2 x `concurrency` pages queued or in flight hold
    only what is sent (a 2400 px copy is ~11 MB against ~2 MB for a 1 Mpx page)."""
    spec = find_spec(backend.name)
    return spec is not None and spec.reads_full_pixels


def internal_failure(ref: DocumentRef, exc: BaseException, backend: str | None) -> Failure:
    """A bug in idflow (not in the document) still accounts for the document; retried once by the retry flow."""
    return Failure.for_ref(ref, "internal", Reason.INTERNAL_ERROR, redact(f"{type(exc).__name__}: {exc}")[:500],
                           backend=backend)


def _prepared(prepare: Callable[..., PreparedImage | Failure], ref: DocumentRef, settings: PrepareSettings,
              keep_full: bool, pack: Callable[[PreparedImage], PreparedImage] | None) -> PreparedImage | Failure:
    """One page prepared, then packed as the backend will send it (`ExtractionBackend.pack`), on one thread."""
    page = prepare(ref, settings, keep_full=keep_full)
    return pack(page) if pack is not None and isinstance(page, PreparedImage) else page


def without_pixels(outcome: Outcome) -> Outcome:
    """The outcome as the writer needs it: a record's decoded pages are dropped as soon as it is validated, so
    outcomes waiting for the writer (or crossing to a Dask client) hold no images."""
    if isinstance(outcome, Record):
        return dataclasses.replace(outcome, prepared=dataclasses.replace(outcome.prepared, pixels=None,
                                                                         full_pixels=None, sent_jpeg=None))
    return outcome


def finish(extraction: Extraction | Failure, prepared: PreparedImage, trust: Trust) -> Record | Failure:
    """The validate stage for one extraction, from the engine or from an imported batch answer: validation, then
    the confidence of every field it kept (`trust`: the one place confidence is decided)."""
    if isinstance(extraction, Failure):
        return extraction
    outcome = validate(extraction, prepared)
    if isinstance(outcome, Record):
        outcome.extraction = trust(outcome.extraction)
    return without_pixels(outcome)  # type: ignore[return-value]


class Engine:
    """prepare -> extract -> validate over a stream, with one bounded pool per kind of work.

    `concurrency` (settings) is the number of documents being extracted at once; `prepare_workers` (default: the
    machine's cores) the number of pages being prepared at once, in threads (OpenCV, Pillow and ONNX Runtime
    release the GIL). With a `journal` (a run writing OUT), every page's preparation is journaled, and a page a
    run that died was preparing (`journal.suspects`) is prepared in a child process instead; `isolated` counts
    them. With `thumbnails`, the review page's thumbnails of the records it will list first are made from the pages
    sent (no second decode after the run). Use as
    `async with Engine(...) as engine: async for outcome in engine.run(items)`; leaving the block closes the backend
    and the preparation threads.
    """

    def __init__(self, settings: Settings, backend: ExtractionBackend, *, prepare_workers: int | None = None,
                 request_slot: RequestSlot | None = None, journal: CrashJournal | None = None,
                 thumbnails: RunThumbnails | None = None) -> None:
        return_freed_memory()  # before the first page: a heap grown by other settings is kept
        self.settings = settings
        self.backend = backend
        self.trust = Trust.of(settings.calibration)
        self.concurrency = max(1, settings.concurrency)
        self.prepare_workers = max(1, prepare_workers or os.cpu_count() or 1)
        self.isolated = 0
        self._request_slot = request_slot
        self._journal = journal
        self._thumbnails = thumbnails
        self._threads = ThreadPoolExecutor(self.prepare_workers, thread_name_prefix="idflow-prepare")

    async def __aenter__(self) -> Engine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.backend.aclose()
        finally:
            self._threads.shutdown(wait=False, cancel_futures=True)

    async def prepared(self, items: Iterable[Item] | AsyncIterable[Item]) -> AsyncIterator[PreparedImage | Failure
                                                                                           | Skipped]:
        """Only the prepare stage (batch export): prepared pages, failures and skips, in completion order."""
        async for outcome in self._pipeline(items, extract=False):
            yield outcome

    async def run(self, items: Iterable[Item] | AsyncIterable[Item]) -> AsyncIterator[Outcome]:
        """One outcome per item, in completion order: skips and ingest failures pass through unchanged."""
        async for outcome in self._pipeline(items, extract=True):
            yield outcome  # type: ignore[misc]

    async def one(self, ref: DocumentRef) -> Record | Failure:
        """A single document end to end (benchmarks timing one page at a time, tests, `idflow doctor`)."""
        (outcome,) = [outcome async for outcome in self.run([ref])]
        return outcome  # type: ignore[return-value]

    async def _pipeline(self, items: Iterable[Item] | AsyncIterable[Item], *, extract: bool) -> AsyncIterator[Any]:
        todo: asyncio.Queue[Any] = asyncio.Queue(self.prepare_workers)
        ready: asyncio.Queue[Any] = asyncio.Queue(self.concurrency)
        unfinished: asyncio.Queue[Any] = asyncio.Queue(self.concurrency)
        done: asyncio.Queue[Any] = asyncio.Queue(self.concurrency + self.prepare_workers)
        extractors = self.concurrency if extract else 0
        finishers = self.concurrency if extract and hasattr(self.backend, "extract_deferring") else 0

        async def feed() -> None:
            async for item in _aiter(items):
                await (todo.put(item) if isinstance(item, DocumentRef) else done.put(item))
            for _ in range(self.prepare_workers):
                await todo.put(_DONE)

        keep_full = not extract or _reads_full_pixels(self.backend)
        pack = getattr(self.backend, "pack", None) if extract else None  # the page as it will be sent

        async def prepare() -> None:
            while (ref := await todo.get()) is not _DONE:
                page = await self._prepare(ref, keep_full, pack)
                await (ready.put(page) if extract and isinstance(page, PreparedImage) else done.put(page))

        async def extract_pages() -> None:
            async with self._request_slot() if self._request_slot else nullcontext():
                while (page := await ready.get()) is not _DONE:
                    outcome = await self._extract(page)
                    await (unfinished.put(outcome) if isinstance(outcome[0], Unfinished) else done.put(outcome[0]))

        async def finish_pages() -> None:
            while (item := await unfinished.get()) is not _DONE:
                await done.put(await self._finish(*item))

        loop = asyncio.get_running_loop()
        crashed: asyncio.Future[None] = loop.create_future()  # a stage itself failed (not a document)

        def watch(task: asyncio.Task[None]) -> None:
            if not task.cancelled() and task.exception() is not None and not crashed.done():
                crashed.set_exception(task.exception())  # type: ignore[arg-type]

        feeder = asyncio.create_task(feed(), name="idflow-feed")
        preparers = [asyncio.create_task(prepare()) for _ in range(self.prepare_workers)]
        pullers = [asyncio.create_task(extract_pages()) for _ in range(extractors)]
        checkers = [asyncio.create_task(finish_pages()) for _ in range(finishers)]

        async def close_stages() -> None:
            await asyncio.gather(feeder, *preparers)
            for _ in pullers:
                await ready.put(_DONE)
            await asyncio.gather(*pullers)
            for _ in checkers:
                await unfinished.put(_DONE)
            await asyncio.gather(*checkers)
            await done.put(_DONE)

        everything = [feeder, *preparers, *pullers, *checkers, asyncio.create_task(close_stages())]
        for task in everything:
            task.add_done_callback(watch)
        try:
            while True:
                getter = asyncio.ensure_future(done.get())
                await asyncio.wait({getter, crashed}, return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    crashed.result()  # e.g. the walk raised, or the run is being terminated: stop the run
                outcome = getter.result()
                if outcome is _DONE:
                    break
                yield outcome
        finally:
            for task in everything:
                task.cancel()
            await asyncio.gather(*everything, return_exceptions=True)
            if crashed.done() and not crashed.cancelled():
                crashed.exception()  # retrieved: raised above, or moot once the consumer stopped

    async def _prepare(self, ref: DocumentRef, keep_full: bool,
                       pack: Callable[[PreparedImage], PreparedImage] | None = None) -> PreparedImage | Failure:
        journal = self._journal
        suspect = journal is not None and ref.key in journal.suspects
        self.isolated += suspect
        if journal is not None:
            journal.begin(ref.key)
        try:
            loop = asyncio.get_running_loop()
            outcome = await loop.run_in_executor(self._threads, functools.partial(
                _prepared, prepare_isolated if suspect else prepare_page, ref, self.settings.prepare, keep_full,
                pack))
        except Exception as exc:  # noqa: BLE001 - any bug is contained to this document
            outcome = internal_failure(ref, exc, self.backend.name)
        if journal is not None:
            journal.end(ref.key)  # not when cancelled: an interrupted page may be one that hung
        return outcome

    async def _extract(self, page: PreparedImage) -> tuple[Record | Failure | Unfinished, PreparedImage]:
        """The page's validated outcome, or `Unfinished` (with the page) when its second reading is to come."""
        try:
            deferring = getattr(self.backend, "extract_deferring", None)
            (extraction,) = await (deferring or self.backend.extract)([page])
            if isinstance(extraction, Unfinished):
                return extraction, page
            outcome = finish(extraction, page, self.trust)
        except Exception as exc:  # noqa: BLE001 - any bug is contained to this document
            return internal_failure(page.ref, exc, self.backend.name), page
        return await self._pictured(outcome, page), page

    async def _finish(self, pending: Unfinished, page: PreparedImage) -> Record | Failure:
        """An `Unfinished` page's second reading, then the validate stage."""
        try:
            outcome = finish(await pending.finish(), page, self.trust)
        except Exception as exc:  # noqa: BLE001 - any bug is contained to this document
            return internal_failure(page.ref, exc, self.backend.name)
        return await self._pictured(outcome, page)

    async def _pictured(self, outcome: Record | Failure, page: PreparedImage) -> Record | Failure:
        """`outcome`, its review-page thumbnail made from the page sent when the run keeps thumbnails."""
        if isinstance(outcome, Record) and self._thumbnails is not None:
            await self._picture(outcome, page, self._thumbnails)
        return outcome

    async def _picture(self, record: Record, page: PreparedImage, thumbnails: RunThumbnails) -> None:
        """The review page's thumbnail of `record` made from the page sent, if the page will list it first; not
        when the backend turned the page further (the OCR's upside-down reading: re-prepared as the record says).
        A picture is optional: one that fails here is re-prepared for the page, and the record stands."""
        try:
            if record.extraction.rotation_correction == 0 and thumbnails.wanted(record):
                await asyncio.get_running_loop().run_in_executor(self._threads, thumbnails.keep, record, page)
        except Exception:  # noqa: BLE001
            pass


async def _aiter(items: Iterable[_T] | AsyncIterable[_T]) -> AsyncIterator[_T]:
    """Async iteration over either kind; a plain iterator (the folder walk, which hashes files) is advanced in a
    thread so the event loop keeps serving requests while it reads."""
    if isinstance(items, AsyncIterable):
        async for item in items:
            yield item
        return
    iterator: Iterator[_T] = iter(items)
    while (item := await asyncio.to_thread(next, iterator, _DONE)) is not _DONE:
        yield item  # type: ignore[misc]
