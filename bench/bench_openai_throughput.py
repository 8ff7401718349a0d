"""Throughput of the OpenAI-compatible backend against the loopback chat server, versus the ideal and a loop.

The server runs as a separate process (as a remote endpoint would) with a fixed per-answer latency and a fixed
number of slots; the ideal is slots / latency (32 / 0.4 s = 80 documents/s). The baseline is the seed
article's plain sequential loop with the synchronous SDK (one request at a time), measured on a few pages.

    python bench/bench_openai_throughput.py            # N=320, 32 slots, 400 ms
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
from openai import OpenAI
from PIL import Image, ImageDraw

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.datamodel import DocumentRef, Extraction, PreparedImage  # noqa: E402
from pipeline.extract.model.answer_parsing import parse_answer  # noqa: E402
from pipeline.extract.model.openai_compat import OpenAICompatBackend, encode_jpeg, jpeg_data_url, user_message  # noqa: E402
from pipeline.extract.model.prompts import load_prompt  # noqa: E402
from pipeline.settings import OpenAISettings  # noqa: E402

KEY = "bench-key"
MODEL = "test-vlm"
DISTINCT_IMAGES = 8  # pages share pixel arrays so 320 pages of 1024x640 do not need 600 MB


def card_pixels(i: int, size: tuple[int, int]) -> np.ndarray:
    """A card-like page (flat colours, text), so the JPEG is the size of a real prepared page."""
    image = Image.new("RGB", size, (230, 226 - 3 * i, 214))
    draw = ImageDraw.Draw(image)
    draw.rectangle((40, 40, size[0] // 3, size[1] - 40), fill=(200, 200, 205))
    for row in range(6):
        draw.text((size[0] // 3 + 40, 60 + row * 80), f"FIELD {row}: VALUE {i}-{row}", fill="black", font_size=36)
    return np.asarray(image)


def make_pages(n: int, size: tuple[int, int]) -> list[PreparedImage]:
    pixels = [card_pixels(i, size) for i in range(DISTINCT_IMAGES)]
    return [PreparedImage(ref=DocumentRef(Path(f"bench/{i}.png"), f"{i}.png", f"{i:064x}"),
                          pixels=pixels[i % DISTINCT_IMAGES], original_size=size, sent_size=size,
                          rotation_applied=0, skew_corrected=0.0, orientation="landscape",
                          visual_tokens=size[0] * size[1] // 1024) for i in range(n)]


def start_server(latency: float, slots: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.chat_server", "--port", "0", "--latency", str(latency),
         "--max-concurrency", str(slots), "--api-key", KEY, "--model", MODEL],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line.startswith("READY "):
        process.kill()
        raise RuntimeError(f"chat server did not start: {line!r}")
    return process, line.split(" ", 1)[1]


def stats(base_url: str) -> dict[str, object]:
    port = base_url.split(":")[2].split("/")[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats") as response:
        return json.load(response)


async def run_backend(base_url: str, pages: list[PreparedImage],
                      concurrency: int) -> tuple[float, float, list[object]]:
    """Wall time, client CPU time (encoding, SDK, parsing, validation) and the results.

    One warm-up page first (not timed): the SDK imports its resources lazily on the first call, a one-off
    cost a real run amortises over thousands of pages.
    """
    settings = OpenAISettings(base_url=base_url, api_key=KEY, model=MODEL, timeout_s=30)
    backend = OpenAICompatBackend(settings, concurrency=concurrency)
    await backend.extract(pages[:1])
    started, cpu = time.perf_counter(), time.process_time()
    results = await backend.extract(pages)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    await backend.aclose()
    return elapsed, cpu, list(results)


def run_sequential(base_url: str, pages: list[PreparedImage]) -> float:
    """The seed article's loop: synchronous client, one page after the other."""
    client = OpenAI(api_key=KEY, base_url=base_url, max_retries=0)
    prompt = load_prompt("en")
    started = time.perf_counter()
    for page in pages:
        response = client.chat.completions.create(
            model=MODEL, temperature=0, max_tokens=256,
            messages=[user_message(prompt, jpeg_data_url(encode_jpeg(page.pixels)))])  # type: ignore[list-item]
        parse_answer(response.choices[0].message.content)
    client.close()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=320)
    parser.add_argument("--concurrency", type=int, default=32, help="client in-flight requests (= server slots)")
    parser.add_argument("--latency", type=float, default=0.4)
    parser.add_argument("--sequential-n", type=int, default=20, help="pages for the sequential baseline")
    parser.add_argument("--size", default="1024x640", help="prepared page size WxH")
    args = parser.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    pages = make_pages(args.n, size)  # type: ignore[arg-type]
    jpeg_kb = len(encode_jpeg(pages[0].pixels)) / 1024

    process, base_url = start_server(args.latency, args.concurrency)
    try:
        load = os.getloadavg()[0]
        elapsed, cpu, results = asyncio.run(run_backend(base_url, pages, args.concurrency))
        server = stats(base_url)
        sequential = run_sequential(base_url, pages[: args.sequential_n])
    finally:
        process.terminate()
        process.wait(timeout=10)

    ideal = args.concurrency / args.latency
    rate = args.n / elapsed
    seq_rate = args.sequential_n / sequential
    ok = sum(isinstance(r, Extraction) for r in results)
    print(f"pages {args.n} of {size[0]}x{size[1]} (JPEG ~{jpeg_kb:.0f} KB), server latency "
          f"{args.latency * 1000:.0f} ms, {args.concurrency} slots, client concurrency {args.concurrency}")
    print(f"backend     {elapsed:6.2f} s  {rate:6.1f} docs/s  = {100 * rate / ideal:5.1f}% of ideal {ideal:.0f}/s  "
          f"({ok}/{args.n} extractions, server peak in flight {server['peak_in_flight']}, "
          f"{server['chat_requests']} requests incl. 1 warm-up)")
    print(f"sequential  {sequential:6.2f} s  {seq_rate:6.2f} docs/s  (seed-style loop, {args.sequential_n} pages; "
          f"{args.n} pages would take ~{args.n / seq_rate:.0f} s)")
    print(f"speed-up    x{rate / seq_rate:.1f} over the sequential loop")
    print(f"client CPU  {1000 * cpu / args.n:.1f} ms/doc; machine load average {load:.1f} on {os.cpu_count()} cores "
          "at start (other processes compete for the same cores)")


if __name__ == "__main__":
    main()
