"""Bounded load test of `tether serve` on this machine; prints one JSON report.

Either target a running server (localhost only):

    python benchmarks/serve_load.py --url http://127.0.0.1:8000 --requests 200 --concurrency 16

or let the script start `tether serve` itself on a free 127.0.0.1 port, run, and stop it:

    python benchmarks/serve_load.py --model runs/demo/ppo --reward-model runs/demo/rm --threads 1

The test sends exactly --requests chat completions, --concurrency at a time (a --stream-fraction
of them streamed), then stops. The report has p50/p90/p99 latency, requests/s, generated
tokens/s and the number of errors (with a few samples).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.serve.loadtest import run_load  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def spawned_server(args):
    """`tether serve` in a child process on 127.0.0.1; SIGTERM (graceful) when done."""
    import httpx2

    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--model", args.model, "--host", "127.0.0.1",
           "--port", str(port), "--threads", str(args.threads), "--max-batch-size", str(args.max_batch_size),
           "--queue-depth", str(max(64, args.concurrency * 2)), "--batch-wait-ms", str(args.batch_wait_ms),
           "--no-access-log"]
    if args.reward_model:
        cmd += ["--reward-model", args.reward_model]
    if args.api_key:
        cmd += ["--api-key", args.api_key]
    log = tempfile.TemporaryFile("w+")  # not a pipe: a chatty server must never block on it
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + args.start_timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise SystemExit(f"tether serve exited with {proc.returncode}:\n{log.read()[-4000:]}")
            try:
                if httpx2.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx2.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"tether serve did not answer on {url} within {args.start_timeout} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="A running server on this machine, e.g. http://127.0.0.1:8000.")
    target.add_argument("--model", help="Start `tether serve --model MODEL` for the test.")
    p.add_argument("--reward-model", default=None, help="With --model: also load this reward model.")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--stream-fraction", type=float, default=0.25)
    p.add_argument("--api-key", default=os.environ.get("TETHER_API_KEY"))
    p.add_argument("--threads", type=int, default=1, help="With --model: the server's torch threads.")
    p.add_argument("--max-batch-size", type=int, default=32, help="With --model: the server's batch size.")
    p.add_argument("--batch-wait-ms", type=float, default=5.0, help="With --model: the server's batch wait.")
    p.add_argument("--start-timeout", type=float, default=120.0)
    args = p.parse_args()
    kwargs = dict(requests=args.requests, concurrency=args.concurrency, max_tokens=args.max_tokens,
                  api_key=args.api_key, stream_fraction=args.stream_fraction)
    if args.url:
        report = run_load(args.url, **kwargs)
    else:
        with spawned_server(args) as url:
            report = run_load(url, **kwargs)
    print(json.dumps(report, indent=2))
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
