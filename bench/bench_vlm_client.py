"""The VLM client against its floor: a bare client loop, then the real `idflow run --backend openai`, same files,
same endpoint, in one command; documents/s (steady and whole command), CPU ms a document and peak RSS of each, and
the ratios.

    python bench/bench_vlm_client.py                      # 360 pages, 400 ms an answer, 64 slots, 32 in flight
    python bench/bench_vlm_client.py --rounds 2           # bare, idflow, bare, idflow (ratios per round)
    python bench/bench_vlm_client.py --pages 1000 --no-bare   # peak RSS of a 1,000-page run
    python bench/bench_vlm_client.py --crosscheck         # also idflow with the embedded second reading on
    python bench/bench_vlm_client.py --no-bare --thread-cpu               # idflow's CPU by thread
    python bench/bench_vlm_client.py --no-bare --thread-cpu --pages 2     # ... start-up and end of run alone

The pages: the generated eval set's readable single-page JPEG and PNG scans (`tools/make_samples.py --set eval`,
made once under --set-dir), copied to `--pages` files, every other one re-encoded as PNG (so half the pages are
PNG, half mostly JPEG), each with its number appended so every file's bytes differ (decoders ignore trailing
bytes; nothing is deduplicated).

The endpoint: a loopback chat-completions server in its own process (tests/support/chat_server.py) answering
each page after `--latency` s with at most `--slots` answers at once; the answer is an `extract_v3` answer with
its evidence (the fields, the machine-readable zone's lines, the printed copies) rebuilt from a manifest page's
truth without mistakes (tests/support/mistake_server.py), and token log-probabilities when asked for.

The bare loop (a child process: `--bare-loop`): read the file, decode (a JPEG with draft, i.e. DCT scaling),
EXIF transpose, resize to the visual-token budget, JPEG encode, base64, POST with httpx, parse the JSON answer;
`--concurrency` requests in flight, decoding in as many threads as cores. No orientation, no validation, no
Parquet, no Prefect. Then `idflow run --backend openai --concurrency N` (a child process; a Prefect server is up
first, as in production, and one small warm-up run is made and not counted).

How each figure is taken: documents/s steady = answers / (first request to last answer), from the server's own
request log; whole command = pages / wall time from spawn to exit; CPU ms a document and peak RSS = the child's
rusage (os.wait4: user + system; ru_maxrss), the server's CPU not included (another process). Start-up: spawn to
the first request. Compare the ratios, not the absolute figures: a shared machine drifts.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
KEY = "bench-key-0123456789"
MODEL = "test-vlm"
PREFIX: list[str] = []  # before `python -m idflow run` (--idflow-prefix: a profiler)
PROMPT = "Extract doc_type, name, id_number, expiry_date and orientation of this identity document as JSON."
# The visual-token budget idflow's defaults send (PrepareSettings): long edge, pixels, patch.
MAX_LONG_EDGE, MAX_PIXELS, PATCH = 1600, 1_048_576, 32


# ---------------------------------------------------------------------------------------------------------------
# The endpoint (a child process)
# ---------------------------------------------------------------------------------------------------------------


def serve(manifest: Path, latency: float, slots: int) -> None:
    """A chat server answering every image with one of the manifest pages' truthful evidence answers (chosen by the
    image's hash), with log-probabilities when asked; GET /timeline lists (started, ended, status) per request."""
    sys.path.insert(0, str(REPO))
    from tests.support.chat_server import ChatCall, ChatServer, Reply, ServerConfig
    from tests.support.mistake_server import LogprobModel, compose, page_truth, render_answer, token_logprobs

    entries = [e for e in json.loads(manifest.read_text(encoding="utf-8"))
               if e.get("path") and "expect_failure" not in e and not e.get("expect_skip")]
    answers = []
    for entry in entries:
        text, marks = render_answer(compose(page_truth(entry), [], 0, entry["path"]), evidence=True)
        answers.append((text, marks))
    server: ChatServer

    def respond(call: ChatCall) -> Reply:
        key = call.image_sha256 or ""
        text, marks = answers[int(key[:8] or "0", 16) % len(answers)]
        logprobs = None
        if call.body.get("logprobs"):
            logprobs = token_logprobs(text, marks, LogprobModel(), random.Random(key),
                                      int(call.body.get("top_logprobs") or 0))
        return Reply(fields=json.loads(text), content=text, logprobs=logprobs)

    def timeline() -> list[list[Any]]:
        return [[r.started, r.ended, r.status] for r in server.chat_requests()]

    config = ServerConfig(api_key=KEY, model=MODEL, latency_s=latency, max_concurrency=slots, responder=respond,
                          routes={"/timeline": timeline})
    server = ChatServer(config)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.stop).start())
    print(f"READY {server.base_url}", flush=True)
    server.serve_forever()


# ---------------------------------------------------------------------------------------------------------------
# The bare client loop (a child process)
# ---------------------------------------------------------------------------------------------------------------


def budget(width: int, height: int) -> tuple[int, int]:
    """(w, h) in patch multiples within the long-edge and pixel budget, aspect kept (Qwen's smart_resize)."""
    w, h = max(1, round(width / PATCH)) * PATCH, max(1, round(height / PATCH)) * PATCH
    if w * h <= MAX_PIXELS and max(w, h) <= MAX_LONG_EDGE:
        return w, h
    shrink = max((width * height / MAX_PIXELS) ** 0.5, max(width, height) / MAX_LONG_EDGE)
    return max(1, int(width / shrink / PATCH)) * PATCH, max(1, int(height / shrink / PATCH)) * PATCH


def bare_prepare(path: Path) -> str:
    """The data URL of one page: decode (JPEG with draft), EXIF transpose, resize to the budget, JPEG encode."""
    from PIL import Image, ImageOps

    with Image.open(io.BytesIO(path.read_bytes())) as image:
        transposed = image.getexif().get(0x0112, 1) in (5, 6, 7, 8)
        width, height = image.size[::-1] if transposed else image.size
        size = budget(width, height)
        if image.format == "JPEG":
            image.draft("RGB", size[::-1] if transposed else size)
        page = ImageOps.exif_transpose(image).convert("RGB")
    page = page.resize(size, Image.Resampling.BILINEAR, reducing_gap=2.0)
    out = io.BytesIO()
    page.save(out, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode("ascii")


async def bare_loop(folder: Path, base_url: str, concurrency: int) -> int:
    """Every page of `folder` through prepare -> POST -> parse, `concurrency` at a time; pages answered."""
    import httpx

    paths = sorted(p for p in folder.iterdir() if p.is_file())
    pending = iter(paths)
    loop = asyncio.get_running_loop()
    threads = ThreadPoolExecutor(os.cpu_count() or 1)
    answered = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60,
                                 headers={"Authorization": f"Bearer {KEY}"}) as client:
        async def worker() -> None:
            nonlocal answered
            for path in pending:
                url = await loop.run_in_executor(threads, bare_prepare, path)
                body = {"model": MODEL, "temperature": 0, "max_tokens": 512, "messages": [
                    {"role": "user", "content": [{"type": "text", "text": PROMPT},
                                                 {"type": "image_url", "image_url": {"url": url}}]}]}
                response = await client.post("/chat/completions", json=body)
                response.raise_for_status()
                json.loads(response.json()["choices"][0]["message"]["content"])
                answered += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return answered


# ---------------------------------------------------------------------------------------------------------------
# The pages
# ---------------------------------------------------------------------------------------------------------------


def generated_set(folder: Path, count: int) -> Path:
    if not (folder / "manifest.json").exists():
        subprocess.run([sys.executable, str(REPO / "tools/make_samples.py"), str(folder), "--set", "eval",
                        "--count", str(count), "--jobs", str(os.cpu_count() or 1)], check=True)
    return folder / "manifest.json"


def make_pages(manifest: Path, pages: int, into: Path) -> dict[str, int]:
    """`pages` files from the set's readable single-page JPEG/PNG scans; every other one re-encoded as PNG (after
    its EXIF rotation); each file's number appended, so all bytes differ."""
    from PIL import Image, ImageOps

    entries = [e for e in json.loads(manifest.read_text(encoding="utf-8"))
               if e.get("path", "").lower().endswith((".jpg", ".png")) and "expect_failure" not in e
               and not e.get("expect_skip")]
    sources = sorted({manifest.parent / e["path"] for e in entries})
    as_png: dict[Path, bytes] = {}
    into.mkdir(parents=True, exist_ok=True)
    kinds = {"jpg": 0, "png": 0}
    for i in range(pages):
        src = sources[i % len(sources)]
        if i % 2 and src.suffix.lower() != ".png":
            if src not in as_png:
                with Image.open(src) as image:
                    out = io.BytesIO()
                    ImageOps.exif_transpose(image).convert("RGB").save(out, "PNG")
                as_png[src] = out.getvalue()
            data, suffix = as_png[src], ".png"
        else:
            data, suffix = src.read_bytes(), src.suffix.lower()
        (into / f"p{i:06d}{suffix}").write_bytes(data + i.to_bytes(4, "little"))
        kinds[suffix[1:]] += 1
    return kinds


# ---------------------------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------------------------


def start_server(manifest: Path, latency: float, slots: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, __file__, "--serve", "--manifest", str(manifest), "--latency",
                                str(latency), "--slots", str(slots)], stdout=subprocess.PIPE, text=True, cwd=REPO)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("READY "):
        process.kill()
        raise SystemExit(f"the chat server did not start: {line!r}")
    return process, line.split(" ", 1)[1]


def timeline(base_url: str) -> list[list[Any]]:
    import httpx

    return httpx.get(base_url.rstrip("/") + "/timeline").json()


def run_child(argv: list[str], env: dict[str, str], log: Path, threads: bool = False) -> dict[str, Any]:
    """Spawn, wait, and take the child's own rusage (os.wait4); with `threads`, also the CPU seconds of each of
    its threads, by name (`thread_cpu`)."""
    started = time.monotonic()
    seen: dict[str, tuple[str, float]] = {}
    with log.open("w") as out:
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG if threads else 0)
            if pid:
                break
            seen.update(thread_cpu(child.pid))
            time.sleep(0.05)
    ended = time.monotonic()
    code = os.waitstatus_to_exitcode(status)
    by_name: dict[str, float] = {}
    for name, cpu in seen.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    return {"spawned": started, "ended": ended, "wall": ended - started, "exit": code,
            "cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "threads": by_name}


def thread_cpu(pid: int) -> dict[str, tuple[str, float]]:
    """Thread (id and start time: an id may be reused) -> (name, CPU seconds so far) of a running process, from
    /proc (Linux); the main thread is named "main", the others by the names `THREAD_NAMES` gives them."""
    ticks, found = os.sysconf("SC_CLK_TCK"), {}
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:  # the thread ended
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        name = "main" if tid == str(pid) else stat[stat.index("(") + 1:stat.rindex(")")]
        found[f"{tid}@{fields[19]}"] = (name, (int(fields[11]) + int(fields[12])) / ticks)  # utime + stime
    return found


# Put before the child's PYTHONPATH (`--thread-cpu`): each Python thread gives the OS its name (15 characters), so
# /proc tells the preparation threads from the event loop and Prefect's workers.
THREAD_NAMES = """import ctypes, threading
_libc, _inner = ctypes.CDLL(None), threading.Thread._bootstrap_inner
def _named(self):
    _libc.prctl(15, self.name[:15].encode(), 0, 0, 0)  # PR_SET_NAME
    return _inner(self)
threading.Thread._bootstrap_inner = _named
"""


def figures(ran: dict[str, float], requests: list[list[Any]], pages: int) -> dict[str, float]:
    mine = [r for r in requests if ran["spawned"] <= r[0] <= ran["ended"] and r[2] == 200]
    if not mine:
        raise SystemExit("no answered request in this child's window")
    first, last = min(r[0] for r in mine), max(r[1] for r in mine)
    return {**ran, "answers": len(mine), "steady": len(mine) / (last - first), "whole": pages / ran["wall"],
            "cpu_ms": 1000 * ran["cpu"] / pages, "startup": first - ran["spawned"]}


def line(label: str, f: dict[str, float]) -> str:
    return (f"{label:<22} {f['steady']:6.1f} docs/s steady  {f['whole']:6.1f} whole ({f['wall']:5.1f} s)  "
            f"{f['cpu_ms']:5.1f} ms CPU/doc  peak RSS {f['rss_mb']:5.0f} MB  first request {f['startup']:.1f} s  "
            f"({f['answers']:.0f} answers, exit {f['exit']:.0f})")


def idflow_run(folder: Path, out: Path, base_url: str, concurrency: int, env: dict[str, str],
               log: Path, crosscheck: bool = False, threads: Path | None = None) -> dict[str, Any]:
    """`threads`: a folder holding the THREAD_NAMES sitecustomize, to measure CPU by thread."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**env, "IDFLOW_OPENAI_BASE_URL": base_url, "IDFLOW_OPENAI_API_KEY": KEY, "IDFLOW_OPENAI_MODEL": MODEL,
           "IDFLOW_OPENAI_CROSSCHECK": "true" if crosscheck else "false"}
    if threads is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(threads), env.get("PYTHONPATH", "")])
    ran = run_child([*PREFIX, sys.executable, "-m", "idflow", "run", str(folder), "--out", str(out),
                     "--backend", "openai", "--concurrency", str(concurrency)], env, log, threads=threads is not None)
    if ran["exit"] not in (0, 1):
        sys.stderr.write(log.read_text()[-4000:])
        raise SystemExit(f"idflow run exited {ran['exit']:.0f}")
    return ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=360)
    parser.add_argument("--count", type=int, default=120, help="documents in the generated set the pages come from")
    parser.add_argument("--set-dir", type=Path, default=Path(tempfile.gettempdir()) / "idflow-vlm-client-set")
    parser.add_argument("--latency", type=float, default=0.4)
    parser.add_argument("--slots", type=int, default=64)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="bare + idflow this many times, interleaved")
    parser.add_argument("--no-bare", action="store_true", help="idflow only (e.g. --pages 1000 for the peak RSS)")
    parser.add_argument("--crosscheck", action="store_true",
                        help="also idflow with the embedded second reading on (IDFLOW_OPENAI_CROSSCHECK)")
    parser.add_argument("--idflow-prefix", default="", help="words before `python -m idflow run`, e.g. "
                        "'py-spy record -f raw -o prof.txt --' (the rusage is then the profiler's)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the last idflow run's OUT here")
    parser.add_argument("--thread-cpu", action="store_true",
                        help="also print each idflow run's CPU by thread (Linux /proc; names given to the threads)")
    # child modes
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare-loop", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--manifest", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--base-url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.manifest, args.latency, args.slots)
    if args.bare_loop:
        answered = asyncio.run(bare_loop(args.bare_loop, args.base_url, args.concurrency))
        print(f"answered {answered}")
        return

    PREFIX[:] = args.idflow_prefix.split()
    sys.path.insert(0, str(REPO))
    print(f"{os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    manifest = generated_set(args.set_dir, args.count)
    scratch = Path(tempfile.mkdtemp(prefix="idflow-vlm-client-"))
    try:
        folder = scratch / "in"
        kinds = make_pages(manifest, args.pages, folder)
        warm = scratch / "warm"
        make_pages(manifest, 4, warm)
        print(f"{args.pages} pages ({kinds['jpg']} JPEG, {kinds['png']} PNG, distinct bytes) from {manifest.parent}; "
              f"endpoint {args.latency * 1000:.0f} ms an answer, {args.slots} slots; {args.concurrency} in flight")
        (scratch / "prefect").mkdir()
        server, base_url = start_server(manifest, args.latency, args.slots)
        try:
            runs = measure(args, folder, warm, base_url, scratch)
        finally:
            server.terminate()
            server.wait(timeout=10)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report(*runs)


def measure(args: argparse.Namespace, folder: Path, warm: Path, base_url: str,
            scratch: Path) -> tuple[list[dict[str, float]], ...]:
    """The interleaved runs under a Prefect server started for them, after one small warm-up run."""
    from tests.support.prefect_server import prefect_server

    with prefect_server(scratch / "prefect") as stack:
        env = {**os.environ, "PYTHONPATH": str(REPO), **{k: v for k, v in stack.env.items()
                                                          if k.startswith("PREFECT_")}}
        idflow_run(warm, scratch / "out-warm", base_url, args.concurrency, env, scratch / "warm.log")
        named = scratch / "thread-names"
        named.mkdir()
        (named / "sitecustomize.py").write_text(THREAD_NAMES)
        bare_runs, idflow_runs, cross_runs = [], [], []
        for number in range(args.rounds):
            if not args.no_bare:
                ran = run_child([sys.executable, __file__, "--bare-loop", str(folder), "--base-url", base_url,
                                 "--concurrency", str(args.concurrency)], env, scratch / "bare.log")
                if ran["exit"]:
                    raise SystemExit((scratch / "bare.log").read_text()[-4000:])
                bare_runs.append(figures(ran, timeline(base_url), args.pages))
                print(line(f"bare loop #{number + 1}", bare_runs[-1]), flush=True)
            ran = idflow_run(folder, scratch / "out", base_url, args.concurrency, env, scratch / "idflow.log",
                             threads=named if args.thread_cpu else None)
            idflow_runs.append(figures(ran, timeline(base_url), args.pages))
            print(line(f"idflow run #{number + 1}", idflow_runs[-1]), flush=True)
            if args.thread_cpu:
                print(by_thread(ran["threads"], args.pages), flush=True)
            if args.crosscheck:
                ran = idflow_run(folder, scratch / "out", base_url, args.concurrency, env,
                                 scratch / "cross.log", crosscheck=True)
                cross_runs.append(figures(ran, timeline(base_url), args.pages))
                print(line(f"  + second reading #{number + 1}", cross_runs[-1]), flush=True)
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(scratch / "out", args.keep)
    return bare_runs, idflow_runs, cross_runs


def by_thread(threads: dict[str, float], pages: int) -> str:
    """The run's CPU by thread: the event loop (requests, judging, Prefect's task runs, Parquet, start-up and the
    end-of-run page in the main thread), the preparation threads (a page each), the rest."""
    prepare = sum(cpu for name, cpu in threads.items() if name.startswith("idflow-prepare"))
    main = threads.get("main", 0.0)
    rest = sum(threads.values()) - prepare - main
    return (f"  CPU by thread: main thread (event loop, start-up, end of run) {main:.2f} s; preparation threads "
            f"{prepare:.2f} s = {1000 * prepare / pages:.1f} ms a page; others {rest:.2f} s")


def report(bare_runs: list[dict[str, float]], idflow_runs: list[dict[str, float]],
           cross_runs: list[dict[str, float]]) -> None:
    def median(runs: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in runs)

    if bare_runs:
        print("idflow / bare loop, per round: steady " + ", ".join(
            f"{i['steady'] / b['steady']:.2f}x" for b, i in zip(bare_runs, idflow_runs)) + "; whole command " +
            ", ".join(f"{i['whole'] / b['whole']:.2f}x" for b, i in zip(bare_runs, idflow_runs)) +
            "; CPU a document " + ", ".join(f"{i['cpu_ms'] / b['cpu_ms']:.2f}x" for b, i in zip(bare_runs,
                                                                                                 idflow_runs)))
        print(f"medians: bare {median(bare_runs, 'steady'):.1f} / {median(bare_runs, 'whole'):.1f} docs/s, "
              f"{median(bare_runs, 'cpu_ms'):.1f} ms CPU; idflow {median(idflow_runs, 'steady'):.1f} / "
              f"{median(idflow_runs, 'whole'):.1f} docs/s, {median(idflow_runs, 'cpu_ms'):.1f} ms CPU, peak RSS "
              f"{median(idflow_runs, 'rss_mb'):.0f} MB (bare {median(bare_runs, 'rss_mb'):.0f} MB)")
    if cross_runs:
        extra = median(cross_runs, "cpu_ms") - median(idflow_runs, "cpu_ms")
        print(f"the embedded second reading costs {extra:.1f} ms CPU a page; steady "
              f"{median(cross_runs, 'steady'):.1f} docs/s")


if __name__ == "__main__":
    main()
