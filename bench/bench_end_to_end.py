"""End to end: the real `idflow run` (a subprocess) on a generated set against the loopback chat server.

    python bench/bench_end_to_end.py                        # 94 generated documents, 400 ms, 64 slots, 32 in flight
    python bench/bench_end_to_end.py --pages 1000           # the set's readable pages copied under new names
    python bench/bench_end_to_end.py --embedded             # also the embedded OCR path vs a bare RapidOCR loop

What it reports, and how each figure is taken:
- documents/s: chat answers (HTTP 200) / time from the first request to the last answer (steady state), next to
  the endpoint's ideal min(slots, concurrency) / latency; and over the whole wall time, start-up included.
- requests in flight: the server's own count, sampled every 100 ms (median and max while busy, and a
  one-second timeline).
- prepare ms/page: `prepare_page` as a VLM run calls it, over the set's pages in this process on one thread, CPU time
  (median, p95, mean).
- CPU-seconds per document and peak RSS: the rusage of the `idflow run` process (os.wait4); beside it the CPU the
  loopback server took per answer (this process's CPU during the run, less this thread's), since it runs on the
  same cores.
- fixed start-up: seconds from spawning `idflow run` to its first request, and the pieces of it that can be
  timed alone (importing the CLI and the Prefect flow, loading the orientation models); and the wall time of
  `idflow run` on an empty folder without PREFECT_API_URL: first ever, cold (starting the local Prefect server)
  and warm (joining it).

The server runs in this process (threads), not in the CLI's, so the CLI's figures do not include it; on a shared
machine the figures are noisy, so the load average is printed and ratios are what to compare.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import nullcontext
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.datamodel import DocumentRef, PreparedImage  # noqa: E402
from pipeline.ingest.discover import Discovery  # noqa: E402
from pipeline.settings import PrepareSettings  # noqa: E402
from tests.support.chat_server import ChatServer, ServerConfig  # noqa: E402
from tests.support.prefect_server import prefect_server  # noqa: E402

KEY = "bench-key-0123456789"
MODEL = "test-vlm"


def generated_set(folder: Path, count: int) -> Path:
    """The eval set of `count` documents (tools/make_samples.py), generated once and reused."""
    if not (folder / "manifest.json").exists():
        subprocess.run([sys.executable, str(REPO / "tools/make_samples.py"), str(folder), "--set", "eval",
                        "--count", str(count), "--jobs", str(os.cpu_count() or 1)], check=True)
    return folder


def replicated(source: Path, pages: int, into: Path) -> Path:
    """`pages` single-page files made from the set's readable images, each under a new name with one byte
    appended (different content, so nothing is deduplicated; decoders ignore trailing bytes)."""
    images = sorted(p for p in source.rglob("*") if p.suffix.lower() in {".jpg", ".png", ".webp"}
                    and p.stat().st_size > 1000 and not p.name.startswith("."))
    into.mkdir(parents=True, exist_ok=True)
    for i in range(pages):
        src = images[i % len(images)]
        data = src.read_bytes() + i.to_bytes(4, "little")
        (into / f"p{i:06d}{src.suffix}").write_bytes(data)
    return into


def prepare_cost(folder: Path, limit: int) -> list[float]:
    """CPU seconds of `prepare_page` per readable page as a VLM run prepares it (no full-size copy for an OCR),
    one thread, both orientation models loaded first (loading is start-up cost, not per page)."""
    from pipeline.prepare import orient, prepare_page

    settings = PrepareSettings()
    refs = [item for item in Discovery(folder).items() if isinstance(item, DocumentRef)][:limit]
    orient._get_page_model()
    orient._get_models()
    cpu = []
    for ref in refs:
        started = time.thread_time()
        outcome = prepare_page(ref, settings, keep_full=False)
        if isinstance(outcome, PreparedImage):
            cpu.append(time.thread_time() - started)
    return cpu


def startup_pieces() -> dict[str, float]:
    """Wall seconds of the parts of the fixed cost that can be timed alone, each in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pieces = {}
    for label, code in [("python itself", "pass"),
                        ("import idflow.cli", "import idflow.cli"),
                        ("+ import flows.extract (Prefect)", "import idflow.cli, flows.extract"),
                        ("load the page orientation model", "from pipeline.prepare.orient import _get_page_model;"
                         "import time; t=time.perf_counter(); _get_page_model(); print(time.perf_counter()-t)"),
                        ("load the text detector (careful path only)", "from pipeline.prepare.orient import "
                         "_get_models; import time; t=time.perf_counter(); _get_models(); "
                         "print(time.perf_counter()-t)")]:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        pieces[label] = float(done.stdout) if done.stdout.strip() else time.perf_counter() - started
    return pieces


class InFlightSampler(threading.Thread):
    """The server's in-flight count every `period` seconds, as (time.monotonic(), count): the server's clock."""

    def __init__(self, server: ChatServer, period: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.server, self.period, self.samples = server, period, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period):
            self.samples.append((time.monotonic(), self.server.in_flight))


def run_cli(folder: Path, server: ChatServer, concurrency: int, extra_env: dict[str, str]) -> dict[str, float]:
    """One `idflow run` as a subprocess; wall time, its CPU time and peak RSS: the rusage of that process alone
    (`os.wait4`), not of every child this bench ever waited for (the set generator or a Prefect server would
    otherwise set the peak)."""
    out = Path(tempfile.mkdtemp(prefix="idflow-e2e-out-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "IDFLOW_OPENAI_BASE_URL": server.base_url,
           "IDFLOW_OPENAI_API_KEY": KEY, "IDFLOW_OPENAI_MODEL": MODEL, **extra_env}
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen([sys.executable, "-m", "idflow", "run", str(folder), "--out", str(out),
                                  "--backend", "openai", "--concurrency", str(concurrency)],
                                 env=env, stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - started
        log.seek(0)
        output = log.read().decode(errors="replace")
    shutil.rmtree(out, ignore_errors=True)
    if child.returncode not in (0, 1):
        sys.stderr.write(output[-6000:])
        raise SystemExit(f"idflow run exited {child.returncode}")
    return {"wall": wall, "spawned": started, "cpu": usage.ru_utime + usage.ru_stime,
            "peak_rss_mb": usage.ru_maxrss / 1024, "exit": child.returncode}


def empty_folder_runs(runs: int) -> list[float]:
    """Wall seconds of `idflow run` on an empty folder without PREFECT_API_URL (the README's own way), in a fresh
    Prefect home: the first run also creates Prefect's database; the server is then stopped, so the second starts
    it again (cold); the others join it (warm: what a run within the server's idle time pays)."""
    with tempfile.TemporaryDirectory(prefix="idflow-e2e-empty-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PYTHONPATH=str(REPO), PREFECT_HOME=str(Path(tmp) / "home"), IDFLOW_PREFECT_SERVER_IDLE_S="600")
        (Path(tmp) / "in").mkdir()
        idflow = [sys.executable, "-m", "idflow"]
        walls = []
        try:
            for number in range(runs):
                started = time.monotonic()
                subprocess.run([*idflow, "run", str(Path(tmp) / "in"), "--out", str(Path(tmp) / "out")], env=env,
                               check=True, capture_output=True, cwd=REPO)
                walls.append(time.monotonic() - started)
                if number == 0:
                    subprocess.run([*idflow, "stop-server"], env=env, check=True, capture_output=True, cwd=REPO)
        finally:
            subprocess.run([*idflow, "stop-server", "--force"], env=env, capture_output=True, cwd=REPO)
        return walls


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set-dir", type=Path, default=Path(tempfile.gettempdir()) / "idflow-e2e-set",
                        help="generated set (made here on first use)")
    parser.add_argument("--count", type=int, default=94, help="documents in the generated set")
    parser.add_argument("--pages", type=int, default=0, help="run on this many copied pages instead of the set")
    parser.add_argument("--latency", type=float, default=0.4, help="server seconds per answer")
    parser.add_argument("--slots", type=int, default=64, help="answers the server generates at once")
    parser.add_argument("--concurrency", type=int, default=32, help="idflow --concurrency")
    parser.add_argument("--prepare-pages", type=int, default=60, help="pages timed for prepare ms/page (0: skip)")
    parser.add_argument("--no-startup", action="store_true", help="skip timing the start-up pieces")
    parser.add_argument("--embedded", action="store_true", help="also run bench/bench_embedded.py's two loops")
    parser.add_argument("--prefect", choices=("server", "local"), default="server",
                        help="server: a `prefect server start` up before the run (as in production); local: "
                             "let `idflow run` start or join its local server (from the environment's PREFECT_HOME)")
    parser.add_argument("--empty-runs", type=int, default=6,
                        help="`idflow run` on an empty folder this many times in a fresh Prefect home, for the fixed "
                             "cost first / cold / warm (0: skip)")
    args = parser.parse_args()

    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    folder = generated_set(args.set_dir, args.count)
    scratch = None
    if args.pages:
        scratch = Path(tempfile.mkdtemp(prefix="idflow-e2e-pages-"))
        folder = replicated(folder, args.pages, scratch / "in")

    if args.prepare_pages:
        cpu = prepare_cost(folder, args.prepare_pages)
        print(f"prepare (one thread, CPU): median {statistics.median(cpu) * 1000:.1f} ms/page, "
              f"p95 {percentile(cpu, 0.95) * 1000:.1f} ms, mean {statistics.fmean(cpu) * 1000:.1f} ms, n={len(cpu)}")

    config = ServerConfig(api_key=KEY, model=MODEL, latency_s=args.latency, max_concurrency=args.slots)
    with tempfile.TemporaryDirectory(prefix="idflow-e2e-prefect-") as tmp, ChatServer(config) as server, \
            (prefect_server(Path(tmp)) if args.prefect == "server" else nullcontext()) as stack:
        prefect_env = {k: v for k, v in stack.env.items() if k.startswith("PREFECT_")} if stack else {}
        sampler = InFlightSampler(server)
        sampler.start()
        own_cpu = time.thread_time(), time.process_time()
        ran = run_cli(folder, server, args.concurrency, prefect_env)
        # This process's CPU but this thread's (which only waited): the loopback server and the sampler.
        server_cpu = time.process_time() - own_cpu[1] - (time.thread_time() - own_cpu[0])
        sampler.stop.set()
        chats = [r for r in server.chat_requests() if r.status == 200]
    if scratch:
        shutil.rmtree(scratch, ignore_errors=True)
    if not chats:
        raise SystemExit("no request reached the server")

    first, last = min(r.started for r in chats), max(r.ended for r in chats)
    ideal = min(args.slots, args.concurrency) / args.latency
    steady = len(chats) / (last - first)
    print(f"idflow run: {len(chats)} documents answered, exit {ran['exit']}, wall {ran['wall']:.1f} s")
    print(f"documents/s: {steady:.1f} steady (first request to last answer) = {steady / ideal:.0%} of the "
          f"endpoint's ideal {ideal:.0f}/s; {len(chats) / ran['wall']:.1f}/s over the whole run")
    busy = [n for t, n in sampler.samples if first <= t <= last]
    if busy:
        print(f"requests in flight while busy: median {statistics.median(busy):.0f}, max {max(busy)}, "
              f"allowed {args.concurrency}")
    timeline = {}
    for t, n in sampler.samples:
        timeline.setdefault(int(t - ran["spawned"]), []).append(n)
    print("in flight, max per second since spawn: " + " ".join(f"{max(v)}" for _, v in sorted(timeline.items())))
    print(f"CPU: {ran['cpu']:.1f} s for the run = {ran['cpu'] / len(chats) * 1000:.0f} ms CPU per document; "
          f"peak RSS {ran['peak_rss_mb']:.0f} MB; the loopback server on the same cores: "
          f"{server_cpu / len(chats) * 1000:.0f} ms CPU per answer")
    print(f"fixed start-up: {first - ran['spawned']:.1f} s from spawning idflow run to its first request")

    if not args.no_startup:
        for label, seconds in startup_pieces().items():
            print(f"  {label}: {seconds:.2f} s")
    if args.empty_runs >= 3:
        walls = empty_folder_runs(args.empty_runs)
        warm = walls[2:]
        print(f"fixed cost of `idflow run` on an empty folder, no PREFECT_API_URL: first in a fresh Prefect home "
              f"{walls[0]:.1f} s (creates its database), cold {walls[1]:.1f} s (starts the local server), warm "
              f"median {statistics.median(warm):.1f} s ({min(warm):.1f}-{max(warm):.1f}, {len(warm)} runs joining it)")
    if args.embedded:
        subprocess.run([sys.executable, str(REPO / "bench/bench_embedded.py"), str(folder)], check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})


if __name__ == "__main__":
    main()
