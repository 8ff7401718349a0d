"""Which pages a run is preparing, written down so that a page that kills the run is prepared alone next time.

Why: decoding runs native code (libjpeg, libtiff, libwebp, PDFium, OpenJPEG, ONNX Runtime) in the run's own
threads, because a process per page costs ~15 % of throughput on two cores. A file that crashes a decoder (a
segfault, an abort) or hangs it therefore ends or stalls the whole run, and since nothing was stored for that
page, the next run meets it again, and the one after: one bad file would stop a folder for good.

So a run appends to a journal in OUT, `OUT/.inflight/<run id>.<random>`, a line when it starts preparing a page
(`B <key>`) and one when preparing it returned (`E <key>`), each with one `os.write` on an O_APPEND descriptor:
the kernel keeps what was written however the process dies (a power cut may lose the last lines; then the page
is prepared in the run's own threads once more). The run holds an `flock` on its journal, which the kernel drops
however the process ends. A journal whose lock can be taken belongs to a run that is over; the pages it began
and did not end are suspects. The next run writes them into its own journal (`S <key>`) before it removes the
old one, so they survive that run's death too, and prepares each suspect in a child process
(`pipeline.prepare.isolated`); a page that crashes or hangs the child becomes a `prepare_crashed` failure.

A run that ends in Python (done, an exception, SIGTERM, Ctrl-C) removes its journal only if every page it began
was ended and every suspect it carried was met: a page interrupted by Ctrl-C may be the one that hung, and a
suspect of another input folder waits for a run on that folder. Cost on the normal path: two small writes a page.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path

from pipeline.store.held_file import create_held, is_pending, remove_if_abandoned, take_if_over

JOURNAL_DIR = ".inflight"
_BEGIN, _END, _SUSPECT = "B", "E", "S"


class CrashJournal:
    """This run's journal (open and locked until `close`), and the suspects it took over from runs that died.
    Use `open`; `begin`/`end` are safe from any thread."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd = fd
        self._unfinished: set[str] = set()  # begun or carried, not ended
        self._lock = threading.Lock()
        self.suspects: frozenset[str] = frozenset()

    @classmethod
    def open(cls, out_dir: Path, run_id: str) -> CrashJournal:
        """Start `run_id`'s journal in OUT and take over the unfinished pages of every journal of a run that is over.

        The file is held as `pipeline.store.held_file` holds it (locked before it is named), so another run never takes
        a live journal for a dead one."""
        folder = out_dir / JOURNAL_DIR
        folder.mkdir(parents=True, exist_ok=True)
        # A name of its own for each journal: a flow run retried from the UI keeps its id, and its earlier
        # attempt's journal must be taken over, not replaced.
        path = folder / f"{run_id}.{uuid.uuid4().hex[:12]}"
        journal = cls(path, create_held(path, os.O_WRONLY | os.O_EXCL | os.O_APPEND))
        suspects: set[str] = set()
        for other in sorted(folder.iterdir()):
            if is_pending(other):
                remove_if_abandoned(other)
            elif other != path and not other.name.startswith("."):
                suspects |= journal._take_over(other)
        journal.suspects = frozenset(suspects)
        return journal

    def begin(self, key: str) -> None:
        """Preparing the page `key` starts now."""
        with self._lock:
            self._unfinished.add(key)
        self._write(_BEGIN, [key])

    def end(self, key: str) -> None:
        """Preparing the page `key` returned (with a page or a failure): it did not crash this process."""
        self._write(_END, [key])
        with self._lock:
            self._unfinished.discard(key)

    def close(self) -> None:
        """Release the journal; remove it when nothing in it is left for the next run."""
        with self._lock:
            left = bool(self._unfinished)
        if not left:
            self.path.unlink(missing_ok=True)
        os.close(self._fd)  # drops the lock: a journal still there now belongs to a run that is over

    def __enter__(self) -> CrashJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _take_over(self, other: Path) -> set[str]:
        """The unfinished pages of `other` if its run is over (its lock can be taken), carried into this journal
        before `other` is removed; nothing if its run is alive or another run took it over first."""
        fd = take_if_over(other)
        if fd is None:
            return set()  # its run is alive, or another run took it over first
        try:
            with open(fd, "rb", closefd=False) as f:
                keys = unfinished_keys(f.read().decode("ascii", errors="replace"))
            with self._lock:
                self._unfinished |= keys
            self._write(_SUSPECT, keys)  # carried before the old journal goes
            other.unlink()
            return keys
        finally:
            os.close(fd)

    def _write(self, mark: str, keys: Iterable[str]) -> None:
        lines = "".join(f"{mark} {key}\n" for key in keys)
        if lines:
            os.write(self._fd, lines.encode("ascii"))


def unfinished_keys(text: str) -> set[str]:
    """Keys begun (`B`) or carried (`S`) and not ended (`E`) afterwards in a journal's text. Only whole lines
    count: a last line without its newline is a write cut short (a power cut), and an odd line is skipped."""
    unfinished: set[str] = set()
    for line in text.split("\n")[:-1]:
        mark, _, key = line.partition(" ")
        if not key or mark not in (_BEGIN, _END, _SUSPECT):
            continue
        if mark == _END:
            unfinished.discard(key)
        else:
            unfinished.add(key)
    return unfinished
