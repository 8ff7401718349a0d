"""Stand-ins for `prepare_page` that fail the way a broken decoder does, for `prepare_isolated` to run in a real
child process: a real segfault, a real hang, a Python exception. Importable by the spawned child."""

from __future__ import annotations

import ctypes
import threading

from pipeline.datamodel import DocumentRef
from pipeline.settings import PrepareSettings


def segfault(ref: DocumentRef, settings: PrepareSettings, *, keep_full: bool) -> None:
    ctypes.string_at(0)  # reads address 0: SIGSEGV, as a decoder overrunning a buffer would


def hang(ref: DocumentRef, settings: PrepareSettings, *, keep_full: bool) -> None:
    threading.Event().wait()  # never set: a decoder in an endless loop


def bug(ref: DocumentRef, settings: PrepareSettings, *, keep_full: bool) -> None:
    raise ValueError("a bug in idflow, not a crash")
