"""The `idflow` command line: the top layer. It imports `flows/` (Prefect) and `pipeline/` (the library); neither
imports it back.

`start` is the command's entry point: it installs a SIGTERM handler before the second or so of imports that
`idflow.cli` costs, so a run stopped that early ends with the same one line as a run stopped later, instead of
dying silently under Python's default handler.
"""

from __future__ import annotations

import signal
import sys

STOPPED = "documents finished so far are stored; run the same command again to do the rest"


class StoppedEarly(BaseException):
    """SIGTERM before a command installed its own handler (nothing was started that a stop could harm)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


def _stop_early(number: int, frame: object) -> None:
    raise StoppedEarly(number)


def start() -> None:
    """The `idflow` command (`python -m idflow`, the `idflow` script)."""
    signal.signal(signal.SIGTERM, _stop_early)
    try:
        from pipeline.memory import return_freed_memory

        return_freed_memory()  # before the imports start threads: a heap once made is kept
        from idflow.cli import main

        main()
    except StoppedEarly as stop:
        sys.stdout.write(f"stopped by signal {stop.number}: {STOPPED}\n")
        sys.stdout.flush()
        sys.exit(128 + stop.number)
