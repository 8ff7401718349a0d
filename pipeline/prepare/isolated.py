"""Prepare one page in a child process, for a page suspected of crashing or hanging the process that prepared it.

Why a child process only for suspects (`pipeline.store.crash_journal`): a fresh interpreter's imports and model loading
make a page cost ~0.8 s instead of ~0.03 s (a sample page, this machine), too much for every page, but a page a
run died on must not take the next run with it. The child is a new interpreter (`python -m
pipeline.prepare.isolated`; not a fork: the run has threads and open sessions; not multiprocessing's spawn, which
re-imports the parent's `__main__` and fails when that is not a file), prepares the page with the same code and
settings as the run's own threads, and sends the outcome back pickled on its stdout. If it dies (a signal, an
abort) or does not answer within `TIMEOUT_S`, the page is a `prepare_crashed` failure and the run goes on.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import signal
import subprocess
import sys
from collections.abc import Callable

from pipeline.datamodel import DocumentRef, Failure, PreparedImage, Reason
from pipeline.prepare import prepare_page
from pipeline.settings import PrepareSettings

# Start-up (~0.8 s) plus a page: the slowest page measured prepares in under 2 s on one core.
TIMEOUT_S = 120.0
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

Prepare = Callable[..., PreparedImage | Failure]


def prepare_isolated(ref: DocumentRef, settings: PrepareSettings, *, keep_full: bool,
                     prepare: Prepare = prepare_page, timeout_s: float = TIMEOUT_S) -> PreparedImage | Failure:
    """`prepare(ref, settings, keep_full=...)` in a child process.

    An exception in the child is raised here (the engine makes it the document's `internal_error`); a child that
    dies or hangs gives a `prepare_crashed` failure."""
    # The parent's import path first (a `prepare` from outside the package must unpickle), then the call.
    request = pickle.dumps((sys.path, pickle.dumps((prepare, ref, settings, keep_full, os.getpid()))))
    child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        answer, _ = child.communicate(request, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return _crashed(ref, f"gave no answer within {timeout_s:.0f} s (stopped)")
    code = child.returncode
    if code != 0 or not answer:
        return _crashed(ref, f"crashed too ({_signal_name(-code)})" if code < 0
                        else f"ended with exit code {code} and no answer")
    outcome = pickle.loads(answer)
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def _child() -> None:
    """The child's side: the request from stdin, the outcome (or the exception) pickled to stdout. Anything else
    written to stdout (a library's print) goes to stderr instead, so it cannot corrupt the answer."""
    answer = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    path, call = pickle.load(sys.stdin.buffer)
    sys.path[:] = path
    prepare, ref, settings, keep_full, parent = pickle.loads(call)
    _die_with(parent)
    try:
        outcome: object = prepare(ref, settings, keep_full=keep_full)
    except Exception as exc:  # noqa: BLE001 - a bug, not a crash: raised again in the parent
        outcome = exc
    pickle.dump(outcome, answer)
    answer.close()


def _die_with(parent: int) -> None:
    """On Linux, have the kernel kill this child when the run that started it dies: a hung decoder must not
    outlive a run that was killed (`daemon` children are only ended by a parent that exits in Python)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _crashed(ref: DocumentRef, how: str) -> Failure:
    return Failure.for_ref(ref, "preprocess", Reason.PREPARE_CRASHED,
                           f"a run died while preparing this page; preparing it alone in a child process {how}")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


if __name__ == "__main__":
    _child()
