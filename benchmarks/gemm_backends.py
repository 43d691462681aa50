"""GFLOP/s of the PPO linear layers' products in aten (MKL for fp32 on x86) and in oneDNN.

For each (K, N) weight shape of the bench models and each row count M, times the three
products of a linear layer — forward x·Wᵀ, input gradient dy·W, weight gradient dyᵀ·x — in
``aten`` (``F.linear`` / ``mm``) and in oneDNN (``tether.engines.cpu.onednn``), plus a
decode step: every weight of a model in turn at M = batch rows, in aten, in oneDNN and in
oneDNN with weights packed once (what the decode loop does). Best of ``--reps`` timings
each; prints a markdown table. This is the measurement behind ``cpu.linear_backend``'s default.

    python benchmarks/gemm_backends.py --threads 1 2
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from tether.bench.setup import SIZES
from tether.engines.cpu.onednn import onednn_available


def best_seconds(fn, reps: int, inner: int) -> float:
    for _ in range(2):
        fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, (time.perf_counter() - t0) / inner)
    return best


def dnn(a, b):
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


def product_rows(m: int, shapes: list[tuple[int, int]], reps: int) -> list[str]:
    rows = []
    for k, n in shapes:
        gen = torch.Generator().manual_seed(0)
        x, w, g = (torch.randn(m, k, generator=gen), torch.randn(n, k, generator=gen),
                   torch.randn(m, n, generator=gen))
        work = 2 * m * k * n
        inner = max(1, int(2e8 / work))
        pairs = {
            "forward": (lambda: F.linear(x, w), lambda: dnn(x, w)),
            "input grad": (lambda: g.mm(w), lambda: dnn(g, w.t())),
            "weight grad": (lambda: g.t().mm(x), lambda: dnn(g.t(), x.t())),
        }
        cells = []
        for aten_fn, dnn_fn in pairs.values():
            a = work / best_seconds(aten_fn, reps, inner) / 1e9
            d = work / best_seconds(dnn_fn, reps, inner) / 1e9
            cells.append(f"{a:.0f} / {d:.0f}")
        rows.append(f"| {m} | {k} | {n} | " + " | ".join(cells) + " |")
    return rows


def decode_step_row(size: str, batch: int, reps: int) -> str:
    d = SIZES[size]
    shapes = []
    for _ in range(d.layers):
        shapes += [(d.hidden, d.hidden)] * 4 + [(d.ffn, d.hidden)] * 2 + [(d.hidden, d.ffn)]
    shapes.append((d.vocab, d.hidden))
    weights = [torch.randn(n, k) for n, k in shapes]
    inputs = {k: torch.randn(batch, k) for k in {k for _, k in shapes}}
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, batch) for w in weights]
    work = sum(2 * batch * n * k for n, k in shapes)

    def aten():
        for w in weights:
            F.linear(inputs[w.shape[1]], w)

    def onednn():
        for w in weights:
            dnn(inputs[w.shape[1]], w)

    def onednn_packed():
        for w, p in zip(weights, packed):
            dnn(inputs[w.shape[1]], p)

    ms = [best_seconds(f, reps, 10) * 1e3 for f in (aten, onednn, onednn_packed)]
    rates = [work / (t / 1e3) / 1e9 for t in ms]
    return (f"| {size} | {batch} | " + " | ".join(f"{t:.2f} ms ({r:.0f})" for t, r in zip(ms, rates)) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rows", type=int, nargs="+", default=[16, 456],
                    help="M: 16 = a decode step's batch, 456 = an update minibatch of 8 x 57 tokens.")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    if not onednn_available():
        raise SystemExit("this torch build has no oneDNN")
    shapes = sorted({(d.hidden, d.hidden) for d in (SIZES["small"], SIZES["medium"])}
                    | {(d.hidden, d.ffn) for d in (SIZES["small"], SIZES["medium"])}
                    | {(d.ffn, d.hidden) for d in (SIZES["small"], SIZES["medium"])}
                    | {(d.hidden, d.vocab) for d in (SIZES["small"], SIZES["medium"])})
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"\n### {threads} thread(s): GFLOP/s, aten / oneDNN\n")
        print("| M | K | N | forward | input grad | weight grad |")
        print("| --- | --- | --- | --- | --- | --- |")
        for m in args.rows:
            for row in product_rows(m, shapes, args.reps):
                print(row, flush=True)
        print(f"\n### {threads} thread(s): one decode step's linears (batch 16), time (GFLOP/s)\n")
        print("| size | batch | aten | oneDNN | oneDNN, packed weights |")
        print("| --- | --- | --- | --- | --- |")
        for size in ("small", "medium"):
            print(decode_step_row(size, 16, args.reps), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
