"""Page buffers go back to the system once freed, whatever reads the pages. Imports nothing heavy: the `idflow`
command calls it before numpy and OpenCV start their threads (each thread's first allocation makes a heap)."""

from __future__ import annotations

import ctypes


def return_freed_memory() -> None:
    """Have glibc's allocator give freed memory back to the system (a no-op elsewhere). Called first by the
    `idflow` command, then by every run's engine and by the embedded reader for the library's own callers.

    Why: a page's decoded pixels, resized copies and the embedded reader's detector and recogniser buffers are
    megabytes to tens of MB, allocated and freed on every page from worker threads; by default glibc serves such
    blocks from per-thread heaps it keeps once grown (and raises its mmap threshold after each freed block), so a
    run's resident size climbs although it holds only its queued pages' buffers at a time (the embedded run of the
    15-file sample reached ~1 GB). Blocks of 4 MB and more are mmapped (unmapped when freed), heap tops over 16 MB
    trimmed, and at most two heaps made: that sample then peaks near 600 MB, for a page fault per big buffer.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    for option, value in ((_M_MMAP_THRESHOLD, 4 << 20), (_M_TRIM_THRESHOLD, 16 << 20), (_M_ARENA_MAX, 2)):
        libc.mallopt(option, value)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8  # glibc's malloc.h
