"""A stand-in for `vllm serve` on machines without a GPU: same command line, vLLM-like start-up log, then the
project's chat-completions test server on the requested port.

    python tests/support/fake_vllm.py serve --help=all     # a flag list (minus FAKE_VLLM_UNKNOWN_FLAGS)
    python tests/support/fake_vllm.py serve MODEL --port P --served-model-name N ...

Like vLLM it refuses flags it does not know (so the launcher's filtering is exercised), reads the key from
VLLM_API_KEY, and logs the encoder-cache line computed from `--mm-processor-kwargs` max_pixels (16384 tokens,
1 item, when absent). FAKE_VLLM_STALL_S makes it go silent after that line, as a stalled vLLM does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support import chat_server  # noqa: E402

FLAGS = ["--host", "--port", "--served-model-name", "--max-model-len", "--limit-mm-per-prompt",
         "--mm-processor-kwargs", "--mm-processor-cache-gb", "--generation-config", "--default-chat-template-kwargs",
         "--api-key", "--enable-log-requests", "--gpu-memory-utilization", "--max-num-batched-tokens"]
BATCHED_TOKENS = 16384


def main(argv: list[str]) -> int:
    unknown_here = set(filter(None, os.environ.get("FAKE_VLLM_UNKNOWN_FLAGS", "").split(",")))
    known = [f for f in FLAGS if f not in unknown_here]
    if argv[:1] != ["serve"]:
        print("usage: fake_vllm.py serve ...", file=sys.stderr)
        return 2
    if any(a.startswith("--help") for a in argv):
        print("usage: vllm serve [model_tag] [options]\n\noptions:\n" + "\n".join(f"  {f} VALUE" for f in known))
        return 0
    parser = argparse.ArgumentParser(prog="vllm serve")
    parser.add_argument("model")
    for flag in known:
        parser.add_argument(flag)
    args = parser.parse_args(argv[1:])  # exits 2 on an unknown flag, as vLLM does
    say = lambda line: print(f"INFO {time.strftime('%m-%d %H:%M:%S')} {line}", flush=True)  # noqa: E731
    say(f"vLLM API server version 0.0-fake, model {args.model}")
    say("Loading safetensors checkpoint shards: 100% Completed | 1/1")
    say("Model loading took 4.25 GiB memory and 0.1 seconds")
    max_pixels = json.loads(args.mm_processor_kwargs or "{}").get("max_pixels")
    item = max_pixels // 1024 if max_pixels else 16384
    budget = max(BATCHED_TOKENS, item)
    say(f"Encoder cache will be initialized with a budget of {budget} tokens, and profiled with {budget // item} "
        "image items of the maximum feature size.")
    time.sleep(float(os.environ.get("FAKE_VLLM_STALL_S", "0")))
    say("Available KV cache memory: 20.00 GiB")
    say(f"Starting vLLM API server on http://{args.host}:{args.port}")
    chat_server.main(["--host", args.host or "127.0.0.1", "--port", str(args.port), "--base-path", "/v1",
                      "--api-key", os.environ.get("VLLM_API_KEY", "EMPTY"),
                      "--model", args.served_model_name or args.model])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
