#!/usr/bin/env python
"""What serving Prefect's UI costs the local Prefect server idflow starts (`flows/local_server.py`).

    python bench/bench_server_ui.py [--pairs N]

Each pair starts the local server with the UI (as `IDFLOW_PREFECT_UI=true` does) and without it, in that order or the
other (alternating, so a load change hits both alike), each time in a Prefect home of its own or in the pair's
shared one, and prints per start: the seconds from `BackgroundServer` entering to `/api/health` answering, and
the server's resident memory (VmRSS) once it answered and again after the UI's page of a flow run and every
file it loads were fetched (the API-only server: after the same number of API requests). `cold` is the first
start in a new Prefect home (database created; with the UI, its files copied into the home), `warm` a start in
a home that has them. Medians, and the UI/API-only ratio of each pair's figures.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flows.local_server import BackgroundServer  # noqa: E402

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _fetch(url: str, html: bool = False) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "text/html"} if html else {})
    with _NO_PROXY.open(request, timeout=60) as response:
        return response.read()


def _browse(base: str, ui: bool) -> int:
    """What a browser opening a flow run's page fetches first: the page and its scripts and styles (the
    API-only server: as many health checks). Returns the requests made."""
    if not ui:
        for _ in range(20):
            _fetch(f"{base}/api/health")
        return 20
    page = _fetch(f"{base}/runs/flow-run/00000000-0000-0000-0000-000000000000", html=True).decode()
    assets = re.findall(r'(?:src|href)="(/[^"]+\.(?:js|css))"', page)
    for asset in assets:
        _fetch(base + asset)
    _fetch(f"{base}/ui-settings")
    return len(assets) + 2


def start(home: Path, ui: bool) -> tuple[float, float, float]:
    """(seconds to healthy, MiB once healthy, MiB after browsing) of one server started in `home`."""
    os.environ.update(PREFECT_HOME=str(home))
    os.environ.pop("PREFECT_API_URL", None)
    began = time.monotonic()
    with BackgroundServer(ui=ui, idle_s=0) as server:
        server.wait()
        ready = time.monotonic() - began
        healthy = _rss_mib(server.pid)
        _browse(f"http://127.0.0.1:{server.port}", ui)
        browsed = _rss_mib(server.pid)
        proc = server.proc
    if proc is not None:  # stops by itself (idle 0): the next start must not overlap it
        proc.wait(timeout=120)
    return ready, healthy, browsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args()
    figures: dict[tuple[str, bool], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            order = (True, False) if pair % 2 == 0 else (False, True)
            for ui in order:
                home = Path(tmp) / f"{pair}-{ui}"
                figures.setdefault(("cold", ui), []).append(start(home, ui))
                figures.setdefault(("warm", ui), []).append(start(home, ui))
    names = ("seconds to healthy", "MiB once healthy", "MiB after browsing")
    for kind in ("cold", "warm"):
        with_ui, api_only = figures[(kind, True)], figures[(kind, False)]
        for i, name in enumerate(names):
            ratios = [a[i] / b[i] for a, b in zip(with_ui, api_only, strict=True)]
            print(f"{kind} {name}: UI {statistics.median(a[i] for a in with_ui):.2f}, API only "
                  f"{statistics.median(b[i] for b in api_only):.2f}, ratio (median of pairs) "
                  f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]")


if __name__ == "__main__":
    main()
