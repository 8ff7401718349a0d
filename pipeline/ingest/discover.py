"""Discovery: walk an input folder and turn every file into pages to process, skips, or ingest failures.

Why a generator: a nightly folder can hold 100k files; refs are produced as the walk goes, so memory stays
flat and the first batch starts before the walk ends. Every entry of the folder produces at least one item
(a directory that cannot be listed is one failure, a hidden directory or a directory symlink one skip), which
is what makes `seen == results + failures + skipped` checkable.

Why the odd cases are handled here: an input folder is written by people and scanners, so it can hold a FIFO
(opening it would hang the run), a symlink loop, a link out of the folder, a directory we may not list, a
path longer than the kernel opens, a file being rewritten while we read it. Each becomes a `Skipped` or a
`Failure` with a stable reason, never an exception or a hang. A file's bytes are read once: its SHA-256 and
its page count come from the same bytes.

File names are `str` as `os.walk` gives them: a name that is not valid UTF-8 carries surrogate escapes, so
`os.fsencode(rel_path)` gives back the exact bytes on disk.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Container, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.datamodel import DocumentRef, Failure, Reason, Skipped, SkipReason
from pipeline.ingest.containers import ContainerError, file_type, os_failure, page_count, read_document
from pipeline.settings import PrepareSettings

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


def entries(root: Path, skip: Path | None = None) -> Iterator[Path | OSError]:
    """Every entry below root that is not a directory walked into, in a stable order (a directory's entries
    before its subdirectories'), plus one `OSError` per directory that cannot be listed.

    Directory symlinks are yielded, not followed (so a link to a parent cannot loop the walk); hidden
    directories are yielded, not entered. FIFOs, sockets and devices are yielded like files: the caller
    decides, from their type, never by opening them. Not `os.walk`: it stats each subdirectory by path to
    tell a symlink from a directory, which fails for paths too long to name; `DirEntry` types need no path.
    The directory `skip` (the run's output folder, when it lies inside the input folder) is not an input at all:
    neither walked nor yielded, so a run never reads what an earlier one wrote.
    """
    pending = [root]
    while pending:
        top = pending.pop()
        try:
            with os.scandir(top) as listing:
                found = sorted(listing, key=lambda entry: entry.name)
        except OSError as exc:
            yield exc
            continue
        subdirectories = []
        for entry in found:
            if skip is not None and Path(entry.path) == skip:
                continue
            if _walk_into(entry):
                subdirectories.append(Path(entry.path))
            else:
                yield Path(entry.path)
        pending.extend(reversed(subdirectories))


def _walk_into(entry: os.DirEntry[str]) -> bool:
    try:
        return not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False)
    except OSError:  # no type from the directory listing and no stat either: report it as an entry
        return False


def walk(root: Path, skip: Path | None = None) -> Iterator[Path]:
    """The entries below root (see `entries`), without the directories that could not be listed."""
    for entry in entries(root, skip):
        if isinstance(entry, Path):
            yield entry


@dataclass
class Discovery:
    """Discovery state for one run: which content was already seen, so duplicates are done once.

    A content that fails at ingest (an empty file, a container that cannot be opened) is not done at all, so each
    further file holding it is the same failure under its own path, not a duplicate: someone asking which uploads
    were empty finds every one of them in the failure queue."""

    root: Path
    done_keys: Container[str] = frozenset()
    # Relative paths to look at instead of walking the whole folder (a shard of a sharded run).
    only: Sequence[str] | None = None
    seen_hashes: set[str] = field(default_factory=set)
    failed_hashes: dict[str, ContainerError] = field(default_factory=dict)  # content -> why it cannot be read
    settings: PrepareSettings = field(default_factory=PrepareSettings)
    skip_dir: Path | None = None  # the run's output folder (absolute), never read as input

    def items(self) -> Iterator[Item]:
        root = self.root.resolve()
        found = entries(root, self.skip_dir) if self.only is None else (root / rel for rel in self.only)
        for entry in found:
            if isinstance(entry, OSError):
                yield _unlistable_directory(root, entry)
            else:
                yield from self._file_items(root, entry)

    def _file_items(self, root: Path, path: Path) -> Iterator[Item]:
        rel = _relative(root, path)
        reason = skip_reason(path.name)
        if reason is not None:
            yield Skipped(rel, reason)
            return
        try:
            data = self._read_inside(root, path)
        except _DirectorySymlink:
            yield Skipped(rel, SkipReason.DIRECTORY_SYMLINK)
            return
        except ContainerError as exc:
            yield Failure(rel, None, None, "ingest", exc.reason, exc.detail)
            return
        digest = hashlib.sha256(data).hexdigest()
        if (failed := self.failed_hashes.get(digest)) is not None:
            yield Failure(rel, digest, None, "ingest", failed.reason, failed.detail)
            return
        if digest in self.seen_hashes:
            yield Skipped(rel, SkipReason.DUPLICATE_CONTENT, sha256=digest)
            return
        try:
            pages = page_count(data, self.settings)
        except ContainerError as exc:
            self.failed_hashes[digest] = exc
            yield Failure(rel, digest, None, "ingest", exc.reason, exc.detail)
            return
        self.seen_hashes.add(digest)
        for page in range(pages):
            ref = DocumentRef(path=path, rel_path=rel, sha256=digest, page=page, page_count=pages)
            if ref.key in self.done_keys:
                yield Skipped(rel, SkipReason.ALREADY_DONE, sha256=digest, page=page)
            else:
                yield ref

    def _read_inside(self, root: Path, path: Path) -> bytes:
        """The bytes of `path`, which must resolve to a regular file inside root (a symlink to one is fine).

        Raises `ContainerError` (or `_DirectorySymlink` for a link to a directory inside root). Containment is
        checked on the resolved path for every entry, not only symlinks: a shard manifest (`only`) can name
        `../x` or a path through a directory symlink.
        """
        try:
            st = os.lstat(path)
            target_st = os.stat(path) if stat.S_ISLNK(st.st_mode) else st  # ELOOP: loop, ENOENT: dangling
        except OSError as exc:
            if exc.errno == errno.ENOENT and os.path.islink(path):
                raise ContainerError(Reason.BROKEN_SYMLINK, "symlink to a path that does not exist") from exc
            raise os_failure(exc) from exc
        target = Path(os.path.realpath(path))
        if not target.is_relative_to(root):
            raise ContainerError(Reason.SYMLINK_OUTSIDE_ROOT,
                                 f"resolves to a {file_type(target_st.st_mode)} outside the input folder; refused")
        if stat.S_ISLNK(st.st_mode) and stat.S_ISDIR(target_st.st_mode):
            raise _DirectorySymlink
        # The resolved path, not followed again: a link swapped in after the containment check is refused.
        return read_document(target, self.settings.max_input_bytes, follow_symlinks=False)


class _DirectorySymlink(Exception):
    """A symlink to a directory inside the root: reported as a skip, its target is walked on its own."""


def _relative(root: Path, path: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:  # `only` may name a path with `..` in it; keep it as given
        return path.as_posix()


def _unlistable_directory(root: Path, exc: OSError) -> Failure:
    """One failure for a directory `os.walk` could not list: everything under it is unknown, and counted once."""
    where = Path(exc.filename) if exc.filename is not None else root
    reason = Reason.PATH_TOO_LONG if exc.errno == errno.ENAMETOOLONG else Reason.UNREADABLE
    return Failure(_relative(root, where), None, None, "ingest", reason, f"cannot list directory: {exc.strerror}")
