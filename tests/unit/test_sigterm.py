"""`flows.sigterm`: a SIGTERM inside the block cancels the task at its await and the block ends with
`TerminationSignal`, wherever the signal lands; the handler in place before is back afterwards. (The same in a
real flow run, exit code and one line: tests/integration/test_prefect_background.py.)"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest
from prefect.exceptions import TerminationSignal

from flows.sigterm import sigterm_cancels


@pytest.fixture
def handler_before() -> Iterator[list[int]]:
    """A SIGTERM handler that only records, in place around the test (never the default, which would end the
    test process if the block let a signal through)."""
    seen: list[int] = []

    def record(number: int, frame: object) -> None:
        seen.append(number)

    previous = signal.signal(signal.SIGTERM, record)
    try:
        yield seen
    finally:
        assert signal.getsignal(signal.SIGTERM) is record  # the block put it back
        signal.signal(signal.SIGTERM, previous)


def test_a_signal_landing_in_a_callback_ends_the_block_with_termination_signal(handler_before: list[int]) -> None:
    unwound: list[bool] = []

    async def body() -> None:
        async with sigterm_cancels():
            asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGTERM)
            try:
                await asyncio.sleep(30)
            finally:
                unwound.append(True)

    with pytest.raises(TerminationSignal) as raised:
        asyncio.run(body())
    assert raised.value.signal == signal.SIGTERM and unwound == [True] and handler_before == []


def test_a_body_that_absorbs_the_cancellation_still_ends_with_termination_signal_and_no_cancel_pending(
        handler_before: list[int]) -> None:
    async def body() -> str:
        try:
            async with sigterm_cancels():
                asyncio.get_running_loop().call_soon(signal.raise_signal, signal.SIGTERM)
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    pass  # swallowed by something inside
        except TerminationSignal:
            # not left cancelling: a timeout or task group around Prefect's crash report would take it for theirs
            assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
            await asyncio.sleep(0)
            return "reported"
        return "finished"

    assert asyncio.run(body()) == "reported" and handler_before == []


def test_without_a_signal_the_block_is_transparent(handler_before: list[int]) -> None:
    async def body() -> int:
        async with sigterm_cancels():
            await asyncio.sleep(0)
            return 7

    assert asyncio.run(body()) == 7
