"""A process-local progress hook: the flow reports, whoever drives it (the CLI's progress bar) listens.

Why not a flow parameter: callables are not valid Prefect parameters (they are stored and shown in the UI).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressSink = Callable[[int, int], None]
_sinks: list[ProgressSink] = []


@contextmanager
def listening(sink: ProgressSink) -> Iterator[None]:
    _sinks.append(sink)
    try:
        yield
    finally:
        _sinks.remove(sink)


def report(done: int, total: int) -> None:
    for sink in list(_sinks):
        sink(done, total)
