"""A bounded load test for a tether server on this machine: N requests, C at a time, then stop.

Sends chat completions (a share of them streamed) to a server on localhost only, and reports
latency percentiles, requests/s, generated tokens/s and every error. Used by
``benchmarks/serve_load.py`` and, at a small size, by the integration tests.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from urllib.parse import urlparse

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
PROMPTS = [f"what is {a} {op} {b} ?" for a in range(10) for b in range(10) for op in ("+", "-", "times")]


def check_local(url: str) -> None:
    host = urlparse(url).hostname
    if host not in LOCAL_HOSTS:
        raise ValueError(f"the load test only targets this machine (127.0.0.1, localhost, ::1), not {host!r}")


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100])."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _summary(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    out = {f"p{q}": percentile(ms, q) for q in (50, 90, 99)}
    out.update(max=max(ms) if ms else None, mean=sum(ms) / len(ms) if ms else None)
    return {k: round(v, 1) if v is not None else None for k, v in out.items()}


async def _one(client, url: str, body: dict, stream: bool) -> tuple[int, float | None]:
    """Send one request; return (completion tokens, time to first token or None)."""
    if not stream:
        response = await client.post(url, json=body)
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
        return response.json()["usage"]["completion_tokens"], None
    start, first, tokens = time.perf_counter(), None, None
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {(await response.aread())[:200]!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            if "error" in event:
                raise RuntimeError(f"stream error: {event['error']}")
            if first is None and event.get("choices") and event["choices"][0].get("delta", {}).get("content"):
                first = time.perf_counter() - start
            if event.get("usage"):
                tokens = event["usage"]["completion_tokens"]
    if tokens is None:
        raise RuntimeError("stream ended without a usage chunk")
    return tokens, first


async def _run(url: str, requests: int, concurrency: int, max_tokens: int, api_key: str | None,
               stream_fraction: float, timeout: float, seed: int) -> dict:
    import httpx2

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    rng = random.Random(seed)
    plan = [(rng.choice(PROMPTS), rng.random() < stream_fraction) for _ in range(requests)]
    latencies, ttfts, errors = [], [], []
    tokens = 0
    async with httpx2.AsyncClient(base_url=url, headers=headers, timeout=timeout, limits=limits) as client:
        models = await client.get("/v1/models")
        models.raise_for_status()
        model = models.json()["data"][0]["id"]
        queue = list(plan)

        async def worker():
            nonlocal tokens
            while queue:
                prompt, stream = queue.pop()
                body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}
                t0 = time.perf_counter()
                try:
                    n, first = await _one(client, "/v1/chat/completions", body, stream)
                except Exception as err:  # noqa: BLE001 - every failure is counted and reported
                    errors.append(f"{type(err).__name__}: {err}")
                    continue
                latencies.append(time.perf_counter() - t0)
                tokens += n
                if first is not None:
                    ttfts.append(first)

        batches_before = await _batches_run(client)
        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        duration = time.perf_counter() - start
        batches = await _batches_run(client) - batches_before
    return {
        "url": url, "model": model, "requests": requests, "concurrency": concurrency, "max_tokens": max_tokens,
        "streamed": sum(s for _, s in plan), "ok": len(latencies), "errors": len(errors), "error_samples": errors[:5],
        "duration_s": round(duration, 2), "requests_per_s": round(len(latencies) / duration, 2),
        "completion_tokens": tokens, "tokens_per_s": round(tokens / duration, 1),
        "latency_ms": _summary(latencies), "time_to_first_token_ms": _summary(ttfts),
        "server_batches": batches, "requests_per_batch": round(len(latencies) / batches, 2) if batches > 0 else None,
    }


async def _batches_run(client) -> int:
    """How many model calls the server has made (from GET /health; -1 if it does not say)."""
    response = await client.get("/health")
    return int(response.json().get("batches", {}).get("run", -1)) if response.status_code == 200 else -1


def run_load(url: str, requests: int = 200, concurrency: int = 16, max_tokens: int = 16, api_key: str | None = None,
             stream_fraction: float = 0.25, timeout: float = 300.0, seed: int = 0) -> dict:
    """Run the load test against ``url`` (localhost only) and return its report."""
    check_local(url)
    if requests < 1 or concurrency < 1:
        raise ValueError("requests and concurrency must be at least 1")
    return asyncio.run(_run(url.rstrip("/"), requests, concurrency, max_tokens, api_key, stream_fraction,
                            timeout, seed))
