"""Odd things an input folder can hold, on real files and real processes: each becomes exactly one skip or
failure with a stable reason (never a crash, never a hang), and a page is only ever decoded from bytes whose
SHA-256 is the one discovery recorded."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.datamodel import RETRYABLE_REASONS, DocumentRef, Failure, PreparedImage, Reason, Skipped, SkipReason
from pipeline.ingest.discover import Discovery, Item, walk
from pipeline.prepare import prepare_page
from pipeline.settings import PrepareSettings

SETTINGS = PrepareSettings()


def _png_bytes(seed: int, size: tuple[int, int] = (96, 64)) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def _png(path: Path, seed: int = 0) -> Path:
    path.write_bytes(_png_bytes(seed))
    return path


def _outcomes(items: list[Item]) -> dict[str, tuple[str, str]]:
    """rel_path -> (kind, reason) for skips and failures; refs -> ("ref", "")."""
    out = {}
    for item in items:
        if isinstance(item, DocumentRef):
            out[item.rel_path] = ("ref", "")
        elif isinstance(item, Skipped):
            out[item.rel_path] = ("skip", str(item.reason))
        else:
            out[item.rel_path] = ("fail", str(item.reason))
    return out


def _single(items: list[Item], rel: str) -> Item:
    matching = [i for i in items if i.rel_path == rel]
    assert len(matching) == 1, f"{rel!r} gave {matching}"
    return matching[0]


# --- symlinks -------------------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_symlink_loops_and_dangling_links_are_broken_symlinks(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    _png(root / "sub" / "a.png")
    os.symlink("ping.png", root / "pong.png")
    os.symlink("pong.png", root / "ping.png")
    os.symlink("self.png", root / "self.png")
    os.symlink("gone.png", root / "dangling.png")
    os.symlink("..", root / "sub" / "up")  # a directory loop: following it would walk forever
    os.symlink(root, root / "sub" / "root_again")

    items = list(Discovery(root).items())

    assert _outcomes(items) == {
        "ping.png": ("fail", "broken_symlink"), "pong.png": ("fail", "broken_symlink"),
        "self.png": ("fail", "broken_symlink"), "dangling.png": ("fail", "broken_symlink"),
        "sub/a.png": ("ref", ""),
        "sub/up": ("skip", "directory_symlink"), "sub/root_again": ("skip", "directory_symlink")}
    assert len(items) == 7
    assert "loop" in _single(items, "self.png").detail


def test_symlinks_out_of_the_root_are_refused_for_files_and_directories(tmp_path: Path) -> None:
    root, outside = tmp_path / "in", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    _png(outside / "secret.png", 1)
    _png(root / "mine.png", 2)
    os.symlink(outside / "secret.png", root / "file_link.png")
    os.symlink(outside, root / "dir_link")
    os.symlink("../elsewhere/secret.png", root / "relative_link.png")

    items = list(Discovery(root).items())

    assert _outcomes(items) == {
        "mine.png": ("ref", ""), "file_link.png": ("fail", "symlink_outside_root"),
        "dir_link": ("fail", "symlink_outside_root"), "relative_link.png": ("fail", "symlink_outside_root")}
    assert "directory" in _single(items, "dir_link").detail
    assert all(i.sha256 is None for i in items if isinstance(i, Failure))  # the outside file was never read


# --- not regular files ----------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_fifo_and_socket_are_never_opened(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    _png(root / "a.png")
    os.mkfifo(root / "pipe.jpg")
    os.symlink("pipe.jpg", root / "link_to_pipe.jpg")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(root / "control.sock"))
    try:
        items = list(Discovery(root).items())  # opening the FIFO for reading would block here forever
    finally:
        sock.close()

    assert _outcomes(items) == {
        "a.png": ("ref", ""), "pipe.jpg": ("fail", "not_a_regular_file"),
        "link_to_pipe.jpg": ("fail", "not_a_regular_file"), "control.sock": ("fail", "not_a_regular_file")}
    assert "FIFO" in _single(items, "pipe.jpg").detail
    assert "socket" in _single(items, "control.sock").detail
    # No reader ever had the FIFO open: a non-blocking writer finds none (ENXIO) rather than a stale reader.
    with pytest.raises(OSError) as e:
        os.open(root / "pipe.jpg", os.O_WRONLY | os.O_NONBLOCK)
    assert e.value.errno == 6  # ENXIO


@pytest.mark.timeout(60)
def test_file_replaced_by_a_fifo_after_discovery_fails_in_prepare(tmp_path: Path) -> None:
    path = _png(tmp_path / "a.png")
    [ref] = list(Discovery(tmp_path).items())
    assert isinstance(ref, DocumentRef)
    path.unlink()
    os.mkfifo(path)

    result = prepare_page(ref, SETTINGS)

    assert isinstance(result, Failure)
    assert (result.stage, result.reason) == ("ingest", Reason.NOT_A_REGULAR_FILE)


def test_too_large_file_is_refused_before_reading(tmp_path: Path) -> None:
    _png(tmp_path / "small.png", 1)
    (tmp_path / "big.png").write_bytes(_png_bytes(2, (400, 400)))
    items = list(Discovery(tmp_path, settings=PrepareSettings(max_input_bytes=100_000)).items())
    assert _outcomes(items) == {"small.png": ("ref", ""), "big.png": ("fail", "too_large")}


# --- directories that cannot be walked ------------------------------------------------------------------

def _deep_tree(base: Path, depth: int, name_len: int = 200) -> Iterator[str]:
    """Directories nested below base until the full path is longer than PATH_MAX, made with directory file
    descriptors (the only way to create them); yields each directory's path relative to base."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    rel = ""
    try:
        for level in range(depth):
            name = f"{level:03d}" + "d" * (name_len - 3)
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
            rel = f"{rel}/{name}" if rel else name
            yield rel
        with os.fdopen(os.open("deep.png", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "wb") as fh:
            fh.write(_png_bytes(9))
    finally:
        os.close(fd)


def test_path_too_long_to_open_is_a_failure(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    _png(root / "ok.png")
    path_max = os.pathconf(root, "PC_PATH_MAX")
    dirs = list(_deep_tree(root, depth=path_max // 200 + 2))
    # The first directory whose absolute path no longer fits is where listing fails.
    first_too_long = next(d for d in dirs if len(os.fsencode(root / d)) >= path_max)

    items = list(Discovery(root).items())
    assert _outcomes(items) == {"ok.png": ("ref", ""), first_too_long: ("fail", "path_too_long")}

    # A shard manifest naming a file below it: the file itself cannot be opened.
    deep_file = f"{dirs[-1]}/deep.png"
    [item] = list(Discovery(root, only=[deep_file]).items())
    assert isinstance(item, Failure)
    assert (item.rel_path, item.reason) == (deep_file, Reason.PATH_TOO_LONG)


# --- damaged containers ---------------------------------------------------------------------------------

def _three_page_tiff_with_broken_chain() -> bytes:
    """A valid 3-frame TIFF whose second IFD's next-IFD pointer points past the end of the file."""
    frames = [Image.new("RGB", (60, 50), c) for c in ("red", "green", "blue")]
    buf = io.BytesIO()
    frames[0].save(buf, "TIFF", save_all=True, append_images=frames[1:])
    data = bytearray(buf.getvalue())
    ifd = struct.unpack("<I", data[4:8])[0]
    ifd = struct.unpack("<I", data[ifd + 2 + 12 * struct.unpack("<H", data[ifd:ifd + 2])[0]:][:4])[0]
    next_at = ifd + 2 + 12 * struct.unpack("<H", data[ifd:ifd + 2])[0]
    data[next_at:next_at + 4] = struct.pack("<I", len(data) + 4096)
    return bytes(data)


def test_damaged_multipage_tiff_whose_pages_cannot_be_counted(tmp_path: Path) -> None:
    (tmp_path / "broken.tif").write_bytes(_three_page_tiff_with_broken_chain())
    _png(tmp_path / "fine.png")
    items = list(Discovery(tmp_path).items())
    assert _outcomes(items) == {"broken.tif": ("fail", "unreadable"), "fine.png": ("ref", "")}
    failure = _single(items, "broken.tif")
    assert "TIFF pages" in failure.detail
    assert failure.sha256 == hashlib.sha256((tmp_path / "broken.tif").read_bytes()).hexdigest()


# --- names ----------------------------------------------------------------------------------------------

ODD_NAMES = [b"scan-\xff\xfe-latin1-\xe9.png", b"new\nline.png", b'quo"te\'s.png', b"tab\there.png",
             "身份证.png".encode()]


def test_names_that_are_not_utf8_or_hold_control_characters(tmp_path: Path) -> None:
    root = tmp_path / "in"
    odd_dir = os.fsdecode(b"dir-\xff")
    (root / odd_dir).mkdir(parents=True)
    for i, raw in enumerate(ODD_NAMES):
        _png(root / os.fsdecode(raw), i)
    (root / odd_dir / os.fsdecode(b"text-\xfe.jpg")).write_text("not an image")

    items = list(Discovery(root).items())

    refs = [i for i in items if isinstance(i, DocumentRef)]
    assert sorted(os.fsencode(r.rel_path) for r in refs) == sorted(ODD_NAMES)
    for ref in refs:
        assert (root / os.fsdecode(os.fsencode(ref.rel_path))).read_bytes() == ref.path.read_bytes()
        prepared = prepare_page(ref, SETTINGS)
        assert isinstance(prepared, PreparedImage), prepared
    [failure] = [i for i in items if isinstance(i, Failure)]
    assert os.fsencode(failure.rel_path) == b"dir-\xff/text-\xfe.jpg"
    assert failure.reason is Reason.UNSUPPORTED_TYPE
    failure.detail.encode("utf-8")  # details never carry the (undecodable) name


# --- a file rewritten while the run goes on -------------------------------------------------------------

def test_file_overwritten_after_discovery_is_changed_during_run(tmp_path: Path) -> None:
    path = _png(tmp_path / "a.png", 1)
    [ref] = list(Discovery(tmp_path).items())
    assert isinstance(ref, DocumentRef)
    path.write_bytes(_png_bytes(2))  # same size, other pixels

    result = prepare_page(ref, SETTINGS)

    assert isinstance(result, Failure)
    assert (result.stage, result.reason, result.sha256) == ("ingest", Reason.CHANGED_DURING_RUN, ref.sha256)
    assert result.retryable and Reason.CHANGED_DURING_RUN in RETRYABLE_REASONS
    path.unlink()
    vanished = prepare_page(ref, SETTINGS)
    assert isinstance(vanished, Failure) and vanished.reason is Reason.CHANGED_DURING_RUN


# --- everything at once: the accounting holds -----------------------------------------------------------

@pytest.mark.timeout(120)
def test_seen_equals_results_failures_skipped_for_an_odd_folder(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref")
    (root / "docs").mkdir()
    _png(root / "docs" / "a.png", 1)
    (root / "docs" / "copy.png").write_bytes((root / "docs" / "a.png").read_bytes())
    (root / "broken.tif").write_bytes(_three_page_tiff_with_broken_chain())
    frames = [Image.new("RGB", (80, 60), c) for c in ("red", "green")]
    frames[0].save(root / "two.tif", save_all=True, append_images=frames[1:])
    os.mkfifo(root / "pipe")
    os.symlink("loop", root / "loop")
    os.symlink("docs", root / "docs_link")
    os.symlink(tmp_path, root / "escape")
    _png(root / os.fsdecode(b"\xffname.png"), 7)
    (root / "empty.jpg").write_bytes(b"")

    items = list(Discovery(root).items())
    results = failures = skipped = 0
    for item in items:
        if isinstance(item, Skipped):
            skipped += 1
        elif isinstance(item, Failure):
            failures += 1
        else:
            outcome = prepare_page(item, SETTINGS)
            results += isinstance(outcome, PreparedImage)
            failures += isinstance(outcome, Failure)

    assert (results, failures, skipped) == (4, 5, 3)
    assert len(items) == results + failures + skipped
    # The cheap count the flow uses for progress sees every top-level entry Discovery reports.
    assert len({p.relative_to(root).as_posix() for p in walk(root)}) == len({i.rel_path for i in items})
    assert _outcomes(items)[".git"] == ("skip", str(SkipReason.HIDDEN))


def test_shard_paths_are_held_inside_the_root_too(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    _png(tmp_path / "outside.png", 1)
    _png(root / "sub" / "a.png", 2)
    os.symlink(tmp_path, root / "up")
    items = list(Discovery(root, only=["../outside.png", "up/outside.png", "sub/../sub/a.png", "sub"]).items())
    assert [(i.rel_path, type(i).__name__, str(getattr(i, "reason", ""))) for i in items] == [
        ("../outside.png", "Failure", "symlink_outside_root"),
        ("up/outside.png", "Failure", "symlink_outside_root"),
        ("sub/../sub/a.png", "DocumentRef", ""),
        ("sub", "Failure", "not_a_regular_file"),
    ]
