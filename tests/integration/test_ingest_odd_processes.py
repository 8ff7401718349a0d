"""Odd input folders that need a second process: a directory the walking process may not read (a child run
without the permission bypass) and a file another process rewrites while its page is decoded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pipeline.datamodel import DocumentRef, Reason
from pipeline.ingest.containers import ContainerError
from pipeline.ingest.discover import Discovery
from pipeline.prepare.load import load_page
from tests.support.paths import REPO
from tests.unit.test_ingest_odd_files import SETTINGS, _png, _png_bytes

_DISCOVER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from pipeline.ingest.discover import Discovery
    from pipeline.datamodel import DocumentRef, Skipped
    out = []
    for item in Discovery(Path(sys.argv[1])).items():
        kind = "ref" if isinstance(item, DocumentRef) else "skip" if isinstance(item, Skipped) else "fail"
        out.append([item.rel_path, kind, "" if kind == "ref" else str(item.reason),
                    getattr(item, "detail", "")])
    print(json.dumps(out))
""")


def _without_permission_bypass() -> list[str]:
    """A command prefix under which file permissions apply: as root, drop CAP_DAC_OVERRIDE and
    CAP_DAC_READ_SEARCH from the bounding set (still uid 0, so tmp_path stays reachable) with util-linux's
    setpriv; as any other user permissions apply already."""
    if os.geteuid() != 0:
        return []
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


def test_unreadable_directory_is_one_failure_and_the_rest_is_walked(tmp_path: Path) -> None:
    root = tmp_path / "in"
    for sub in ("a_before", "locked", "z_after"):
        (root / sub).mkdir(parents=True)
    _png(root / "a_before" / "1.png", 1)
    _png(root / "locked" / "hidden_inside.png", 2)
    _png(root / "locked" / "another.png", 3)
    _png(root / "z_after" / "2.png", 4)
    _png(root / "unreadable_file.png", 5)
    (root / "locked").chmod(0)
    (root / "unreadable_file.png").chmod(0)
    try:
        probe = subprocess.run([*_without_permission_bypass(), sys.executable, "-c",
                                "import os, sys; os.listdir(sys.argv[1])", str(root / "locked")],
                               capture_output=True, text=True, check=False)
        assert "PermissionError" in probe.stderr, "the child must really get EACCES"
        done = subprocess.run([*_without_permission_bypass(), sys.executable, "-c", _DISCOVER, str(root)],
                              capture_output=True, text=True, check=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        (root / "locked").chmod(0o755)
        (root / "unreadable_file.png").chmod(0o644)

    rows = json.loads(done.stdout)
    assert [(rel, kind, reason) for rel, kind, reason, _ in rows] == [
        ("unreadable_file.png", "fail", "unreadable"),
        ("a_before/1.png", "ref", ""),
        ("locked", "fail", "unreadable"),
        ("z_after/2.png", "ref", ""),
    ]
    assert all("Permission denied" in detail for _, kind, _, detail in rows if kind == "fail")


_REWRITER = textwrap.dedent("""
    import sys
    path, a, b = sys.argv[1], open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
    first = True
    while True:
        for content in (b, a):
            with open(path, "r+b") as fh:  # in place, as a scanner or a careless copy does
                fh.write(content)
                fh.truncate()
            if first:
                print("rewriting", flush=True)
                first = False
""")


@pytest.mark.timeout(120)
def test_page_decoded_always_matches_the_hash_while_another_process_rewrites_the_file(tmp_path: Path) -> None:
    a_bytes, b_bytes = _png_bytes(1), _png_bytes(2)
    (tmp_path / "a.src").write_bytes(a_bytes)
    (tmp_path / "b.src").write_bytes(b_bytes)
    root = tmp_path / "in"
    root.mkdir()
    target = root / "doc.png"
    target.write_bytes(a_bytes)
    [ref] = list(Discovery(root).items())
    assert isinstance(ref, DocumentRef)
    expected = load_page(ref, SETTINGS)

    writer = subprocess.Popen([sys.executable, "-c", _REWRITER, str(target), str(tmp_path / "a.src"),
                               str(tmp_path / "b.src")], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "rewriting\n"
        matched = changed = 0
        for _ in range(5000):
            try:
                pixels = load_page(ref, SETTINGS)
            except ContainerError as e:
                assert e.reason is Reason.CHANGED_DURING_RUN, e
                changed += 1
            else:
                assert np.array_equal(pixels, expected), "decoded content does not match the ref's sha256"
                matched += 1
            if matched and changed:
                break
    finally:
        writer.kill()
        writer.wait()
    assert matched and changed, (matched, changed)
