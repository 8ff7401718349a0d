"""Discovery: walk an input folder and turn every file into pages to process, skips, or ingest failures.

Why a generator: a nightly folder can hold 100k files; refs are produced as the walk goes, so memory stays
flat and the first batch starts before the walk ends. Every file produces at least one item, which is what
makes `seen == results + failures + skipped` checkable.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.containers import ContainerError, page_count
from pipeline.datamodel import DocumentRef, Failure, Reason, Skipped, SkipReason

IN_PROGRESS_SUFFIXES = (".part", ".tmp", ".crdownload", ".partial")
MARKER_NAMES = frozenset({"_READY", "_SUCCESS"})

Item = DocumentRef | Skipped | Failure


def skip_reason(name: str) -> SkipReason | None:
    """Hidden files, editor/lock files and in-progress uploads are seen but never processed."""
    if name in MARKER_NAMES:
        return SkipReason.MARKER
    if name.startswith("."):
        return SkipReason.HIDDEN
    if name.startswith("~") or name.lower().endswith(IN_PROGRESS_SUFFIXES):
        return SkipReason.IN_PROGRESS
    return None


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def walk(root: Path) -> Iterator[Path]:
    """Files below root in a stable order; hidden directories are not entered, directory symlinks not followed."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


@dataclass
class Discovery:
    """Discovery state for one run: which content was already seen, so duplicates are done once."""

    root: Path
    done_keys: Container[str] = frozenset()
    # Relative paths to look at instead of walking the whole folder (a shard of a sharded run).
    only: Sequence[str] | None = None
    seen_hashes: set[str] = field(default_factory=set)

    def items(self) -> Iterator[Item]:
        root = self.root.resolve()
        paths = walk(root) if self.only is None else (root / rel for rel in self.only)
        for path in paths:
            yield from self._file_items(root, path)

    def _file_items(self, root: Path, path: Path) -> Iterator[Item]:
        rel = path.relative_to(root).as_posix()
        reason = skip_reason(path.name)
        if reason is not None:
            yield Skipped(rel, reason)
            return
        if path.is_symlink():
            target = path.resolve()
            if not target.is_relative_to(root):
                yield Failure(rel, None, None, "ingest", Reason.SYMLINK_OUTSIDE_ROOT,
                              "symlink points outside the input folder; refused")
                return
        try:
            digest = sha256_file(path)
        except OSError as exc:
            yield Failure(rel, None, None, "ingest", Reason.UNREADABLE, f"cannot read file: {exc.strerror}")
            return
        if digest in self.seen_hashes:
            yield Skipped(rel, SkipReason.DUPLICATE_CONTENT, sha256=digest)
            return
        self.seen_hashes.add(digest)
        try:
            pages = page_count(path)
        except ContainerError as exc:
            yield Failure(rel, digest, None, "ingest", exc.reason, exc.detail)
            return
        for page in range(pages):
            ref = DocumentRef(path=path, rel_path=rel, sha256=digest, page=page, page_count=pages)
            if ref.key in self.done_keys:
                yield Skipped(rel, SkipReason.ALREADY_DONE, sha256=digest, page=page)
            else:
                yield ref
