"""Discovery: skip rules, symlink containment, hashing, page enumeration and duplicate content."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.datamodel import DocumentRef, Failure, Reason, Skipped, SkipReason
from pipeline.ingest.discover import Discovery, sha256_file, skip_reason, walk


def _png(path: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    Image.fromarray(rng.integers(0, 255, (64, 96, 3), dtype=np.uint8)).save(path)
    return path


def test_skip_rules() -> None:
    assert skip_reason(".DS_Store") is SkipReason.HIDDEN
    assert skip_reason("scan.jpg.part") is SkipReason.IN_PROGRESS
    assert skip_reason("upload.TMP") is SkipReason.IN_PROGRESS
    assert skip_reason("~$lock.jpg") is SkipReason.IN_PROGRESS
    assert skip_reason("_READY") is SkipReason.MARKER
    assert skip_reason("scan.jpg") is None


def test_discovery_accounts_for_every_file(tmp_path: Path) -> None:
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    a = _png(root / "a.png", 1)
    _png(root / "sub" / "b.png", 2)
    (root / "sub" / "copy_of_a.png").write_bytes(a.read_bytes())
    (root / ".hidden.png").write_bytes(a.read_bytes())
    (root / "half.jpg.part").write_bytes(b"partial")
    (root / "notes.txt").write_text("not an image")
    (root / "empty.jpg").write_bytes(b"")
    frames = [Image.new("RGB", (80, 60), c) for c in ("red", "green", "blue")]
    frames[0].save(root / "multi.tiff", save_all=True, append_images=frames[1:])
    outside = _png(tmp_path / "outside.png", 3)
    os.symlink(outside, root / "escape.png")
    os.symlink(root / "a.png", root / "inside_link.png")

    items = list(Discovery(root).items())
    refs = [i for i in items if isinstance(i, DocumentRef)]
    skips = {i.rel_path: i.reason for i in items if isinstance(i, Skipped)}
    fails = {i.rel_path: i.reason for i in items if isinstance(i, Failure)}

    assert sorted((r.rel_path, r.page) for r in refs) == [
        ("a.png", 0), ("multi.tiff", 0), ("multi.tiff", 1), ("multi.tiff", 2), ("sub/b.png", 0)]
    assert refs[0].sha256 == sha256_file(a)
    assert skips == {".hidden.png": SkipReason.HIDDEN, "half.jpg.part": SkipReason.IN_PROGRESS,
                     "inside_link.png": SkipReason.DUPLICATE_CONTENT,
                     "sub/copy_of_a.png": SkipReason.DUPLICATE_CONTENT}
    assert fails == {"notes.txt": Reason.UNSUPPORTED_TYPE, "empty.jpg": Reason.EMPTY_FILE,
                     "escape.png": Reason.SYMLINK_OUTSIDE_ROOT}
    files = sum(1 for p in root.rglob("*") if p.is_file() or p.is_symlink())
    # every file is one item, except multi-page containers which give one item per page
    assert len(items) == files + 2


def test_done_keys_skip_pages_already_processed(tmp_path: Path) -> None:
    a = _png(tmp_path / "a.png")
    digest = sha256_file(a)
    items = list(Discovery(tmp_path, done_keys={f"{digest}:0"}).items())
    assert items == [Skipped("a.png", SkipReason.ALREADY_DONE, sha256=digest, page=0)]


def test_the_output_folder_inside_the_input_folder_is_not_input(tmp_path: Path) -> None:
    # `idflow run in --out in/out`: the next run must not read the Parquet, summaries and pages it wrote
    root = tmp_path / "in"
    (root / "out" / "results").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"text")
    (root / "out" / "results" / "part-1.parquet").write_bytes(b"PAR1")
    out = (root / "out").resolve()
    assert [i.rel_path for i in Discovery(root, skip_dir=out).items()] == ["a.txt"]
    assert [p.name for p in walk(root.resolve(), out)] == ["a.txt"]
    assert len(list(Discovery(root).items())) == 2  # without it, the output is one more input
