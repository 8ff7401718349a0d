"""A SIGTERM stops a flow body at the await it is waiting on, never inside an event-loop callback.

Prefect's SIGTERM handler raises `TerminationSignal` in whatever Python code the main thread runs when the signal
lands. Under asyncio that is often a callback: a socket's `data_received`, a worker thread's result handed back
to the loop. asyncio logs and drops any exception a callback raises other than `SystemExit` and
`KeyboardInterrupt`, so a signal landing there would be lost: the run would go on, and the HTTP response whose
data it interrupted could hang until the client's timeout. Inside a body wrapped in `stops_on_sigterm` the
handler only asks the loop to cancel the body's task; the body unwinds through its `finally` blocks (parts
written, leases released) and leaves with `TerminationSignal`, which Prefect's engine handles as before: the run is marked Crashed, or
Cancelled when a runner sent the signal to cancel it.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import ParamSpec, TypeVar

from prefect.exceptions import TerminationSignal

_P = ParamSpec("_P")
_R = TypeVar("_R")


def stops_on_sigterm(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """A flow body (under `@flow`, which reads the parameters through `functools.wraps`) run in
    `sigterm_cancels()`."""
    @functools.wraps(fn)
    async def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        async with sigterm_cancels():
            return await fn(*args, **kwargs)
    return run


@asynccontextmanager
async def sigterm_cancels() -> AsyncIterator[None]:
    """For the block, SIGTERM cancels the current task and the block ends with `TerminationSignal` (even when
    something inside absorbed the cancellation and finished). Outside the main thread, where Python delivers no
    signal, the handler in place stays in charge."""
    task = asyncio.current_task()
    if task is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    received: list[int] = []
    active = True

    def cancel() -> None:  # on the loop, at a safe point
        if active:
            task.cancel()

    def on_signal(number: int, frame: object) -> None:
        if not received:
            received.append(number)
            loop.call_soon_threadsafe(cancel)

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        yield
    except BaseException as exc:
        if not received:
            raise
        cause = None if isinstance(exc, asyncio.CancelledError) else exc
        raise TerminationSignal(signal=received[0]) from cause
    finally:
        active = False
        signal.signal(signal.SIGTERM, previous)
        if received and task.cancelling():
            task.uncancel()  # the cancellation was ours: what follows (Prefect reporting the crash) must run
    if received:  # something inside absorbed the cancellation and finished
        raise TerminationSignal(signal=received[0])
