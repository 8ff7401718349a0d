"""What one batch's task run costs: CPU in the run's process and in the Prefect server, per task run.

    python bench/bench_task_runs.py [--tasks 300]

A run's batches are Prefect task runs (`flows/batch_tasks.py`); each one's states, events and log line cost CPU
in the run and in the server, which shares the machine's cores with preparation. This starts a real `prefect
server start`, lets it settle, measures its idle CPU rate, then runs one flow with `--tasks` async task runs that
each log one line (what `process-batch` does besides recording), and prints the CPU per task run on both sides,
the server's idle rate taken off. `IDFLOW_BATCH_SIZE` divided into that figure is the per-document overhead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.prefect_server import prefect_server  # noqa: E402

FLOW = """
import asyncio, sys, time
from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

@task(persist_result=False, cache_policy=NO_CACHE)
async def batch(i):
    get_run_logger().info("batch %d: 64 documents", i)
    return i

@flow
async def run(n):
    started = time.process_time()
    await asyncio.gather(*[batch.with_options(task_run_name=f"batch-{i:05d}")(i) for i in range(n)])
    return time.process_time() - started

print(asyncio.run(run(int(sys.argv[1]))))
"""


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and every live descendant (user + system)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            todo += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            continue
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds to let the server settle, then idle")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, prefect_server(Path(tmp)) as stack:
        server = stack.procs["server"].pid
        time.sleep(args.settle)
        idle_from, idle_started = tree_cpu(server), time.monotonic()
        time.sleep(args.settle)
        idle_rate = (tree_cpu(server) - idle_from) / (time.monotonic() - idle_started)
        before, started = tree_cpu(server), time.monotonic()
        done = subprocess.run([sys.executable, "-c", FLOW, str(args.tasks)], env=stack.env, capture_output=True,
                              text=True, check=True)
        time.sleep(5.0)  # the server records the last events after the flow returns
        server_cpu = tree_cpu(server) - before - idle_rate * (time.monotonic() - started)
        client_cpu = float(done.stdout.strip().splitlines()[-1])
    print(f"{args.tasks} task runs; load average {os.getloadavg()[0]:.1f}")
    print(f"CPU per task run: {1000 * client_cpu / args.tasks:.1f} ms in the run, "
          f"{1000 * server_cpu / args.tasks:.1f} ms in the Prefect server (idle rate {idle_rate:.2f} CPU-s/s off)")


if __name__ == "__main__":
    main()
