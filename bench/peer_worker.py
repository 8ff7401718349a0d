"""A peer reader (PassportEye, blitzid) driven in a venv of its own: never a dependency of idflow.

The worker script is started once with the peer venv's python, so its imports and models load once. It reads one
image path per line on stdin and answers each with one JSON line on stdout that carries its own timing. The
benchmarks alternate idflow and the peer page by page through it (bench/bench_embedded.py says why).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class PeerWorker:
    """One long-lived worker process: one path out, one JSON line back."""

    def __init__(self, name: str, python: Path, script: Path, env: dict[str, str]) -> None:
        self.name = name
        self.process = subprocess.Popen([str(python), str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env={**os.environ, **env})

    def ask(self, path: Path) -> dict[str, Any]:
        """The worker's JSON reply for the image at `path`."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{path}\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name} worker exited ({self.process.wait()}) on {path}")
        return json.loads(line)

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait()


@contextmanager
def peer_worker(name: str, python: Path, script: Path, **env: str) -> Iterator[PeerWorker]:
    """A `PeerWorker` closed (stdin shut, process waited for) when the block ends."""
    worker = PeerWorker(name, python, script, env)
    try:
        yield worker
    finally:
        worker.close()
