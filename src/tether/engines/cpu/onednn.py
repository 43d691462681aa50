"""fp32 linear layers through oneDNN's matmul instead of the BLAS behind ``aten::mm``.

On CPU, PyTorch runs an fp32 ``nn.Linear`` (forward and both backward products) through its
BLAS, MKL on x86 builds; bf16 matmuls already go through oneDNN. On the benchmark's AMD Zen 4
CPU oneDNN's fp32 kernels are the faster of the two: a 2048³ matmul measures ~215 GFLOP/s on two
threads against MKL's ~175, and at the PPO update's shapes (a few hundred rows, K and N of
256-4096) the forward and input-gradient products run 5-30 % faster (see
docs/performance.md). In a decode step (M = batch rows) the gap is widest once each weight is
packed into oneDNN's blocked layout, which a rollout can do once for all its steps because the
weights do not change while it samples. On an Intel Xeon with AMX the order flips: MKL's fp32
kernels are as fast or faster there, so ``cpu.linear_backend=auto`` (the default) chooses by CPU
vendor and precision (:data:`AUTO_BACKEND`, :func:`resolve_backend`).

oneDNN pays ~12-15 µs per call that MKL does not, and its weight-gradient product (a reduction
over the rows) is no faster than MKL's and often slower. So only the forward and input-gradient
products of at least :data:`MIN_MACS` multiply-accumulates go to oneDNN; smaller products and
every weight gradient stay in aten (measured per shape by ``benchmarks/gemm_backends.py``).

The maths is the same product; only the summation order differs, as it does between any two
GEMM kernels. The swap is per module and reversible: :func:`use_onednn_linears` changes the
class of a model's ``nn.Linear`` modules to :class:`OneDNNLinear` (same parameters, same
``state_dict``, still an ``nn.Linear``), which falls back to ``F.linear`` for anything that is
not a plain fp32 CPU product: other dtypes, other devices, or an active autocast (whose bf16
matmuls are oneDNN's already).

Why by hand: no library exposes oneDNN's fp32 linear with autograd; torch ships the kernels
(``torch.ops.mkldnn._linear_pointwise``, used by inductor's CPU freezing passes) but uses them
for fp32 only inside compiled inference graphs.
"""

from __future__ import annotations

import functools
import logging
import math
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger(__name__)

#: Products (rows × in × out multiply-accumulates) below this stay in aten: oneDNN's per-call
#: overhead outweighs its faster kernel (measured on the bench CPU: a 16 × 128 × 512 decode
#: product takes 22-29 µs in MKL and 30-41 µs in oneDNN, a 16 × 128 × 2048 one 79-116 µs in
#: MKL and 56-95 µs with packed oneDNN weights).
MIN_MACS = 1 << 22


def onednn_available() -> bool:
    """This torch build has oneDNN and the linear kernels this module calls."""
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_linear_pointwise")
            and hasattr(ops, "_reorder_linear_weight"))


@functools.cache
def bf16_packing_available() -> bool:
    """oneDNN can pack a bf16 weight on this CPU. Its bf16 reorder needs AVX-512 (BW, VL, DQ) or
    AVX-NE-CONVERT, which some of the fleet's AMD EPYC machines lack ("mkldnn_reorder_linear_weight:
    bf16 path needs the cpu support ..."): asked of oneDNN itself, once, on a 16 × 16 weight."""
    if not onednn_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(16, 16, dtype=torch.bfloat16), 1)
    except RuntimeError:
        return False
    return True


#: ``cpu.linear_backend=auto`` by CPU vendor and ``run.precision``, from in-process A/Bs of whole
#: PPO iterations (docs/performance.md). AMD EPYC Zen 4: oneDNN's products 5-30 %
#: faster. Intel Xeon with AMX, onednn vs aten seconds per iteration: fp32 tiny 0.388
#: vs 0.362, small 2.196 vs 2.162, medium 4.16 vs 4.19 (MKL as fast or faster); bf16 small 1.342
#: vs 1.361, medium 2.368 vs 2.501 (oneDNN's packed bf16 decode and the update threads' shared
#: weight gradients win), tiny 0.384 vs 0.368. CPUs not listed (never measured) keep PyTorch's own.
AUTO_BACKEND = {"AuthenticAMD": {"none": "onednn", "bf16": "onednn"},
                "GenuineIntel": {"none": "aten", "bf16": "onednn"}}


def resolve_backend(choice: str, autocast: str = "none", vendor: str | None = None) -> str:
    """The backend ``cpu.linear_backend=choice`` means on this machine: "onednn" or "aten".

    "auto" looks ``vendor`` (default: this CPU's) and ``autocast`` ("none" or "bf16") up in
    :data:`AUTO_BACKEND`, "aten" for any other; "onednn" becomes "aten" when this torch build
    lacks the kernels.
    """
    if choice not in ("auto", "onednn", "aten"):
        raise ValueError(f"linear backend must be 'auto', 'onednn' or 'aten', got {choice!r}")
    if choice == "auto":
        if vendor is None:
            from tether.engines.cpu.describe import cpu_vendor

            vendor = cpu_vendor()
        choice = AUTO_BACKEND.get(vendor or "", {}).get(autocast, "aten")
    elif choice == "onednn" and not onednn_available():
        log.warning("cpu.linear_backend=onednn, but this torch build has no oneDNN: linear layers stay on aten.")
    return choice if choice == "aten" or onednn_available() else "aten"


def _mm(a: Tensor, b: Tensor) -> Tensor:
    """(M, K) @ (N, K)ᵀ -> (M, N) in oneDNN; either operand may be a transposed view."""
    return torch.ops.mkldnn._linear_pointwise(a, b, None, "none", [], "")


class OneDNNLinearFunction(torch.autograd.Function):
    """``F.linear`` in fp32 on CPU with the forward and input-gradient products in oneDNN.

    x: (..., K), weight: (N, K), bias: (N,) or None -> (..., N). Backward:
    dx = dy · W (M, N)(N, K) in oneDNN, dW = dyᵀ · x (N, M)(M, K) in aten (as ``F.linear``'s own
    backward computes it), db = Σ dy over rows.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        rows = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, weight)
        ctx.has_bias = bias is not None
        out = torch.ops.mkldnn._linear_pointwise(rows, weight, bias, "none", [], "")
        return out.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad: Tensor):
        rows, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = _mm(g, weight.t()).view(*grad.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            dw = g.t().mm(rows)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            db = g.sum(0)
        return dx, dw, db


def _eligible(x: Tensor, weight: Tensor, min_macs: int) -> bool:
    """A plain fp32 CPU product (no autocast) of at least ``min_macs`` multiply-accumulates."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and weight.dtype == torch.float32
            and x.numel() > 0 and not torch.is_autocast_enabled("cpu")
            and x.numel() * weight.shape[0] >= min_macs)


def onednn_linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, min_macs: int | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, through oneDNN when it is a plain fp32 CPU product of at
    least ``min_macs`` (default :data:`MIN_MACS`) multiply-accumulates."""
    if _eligible(x, weight, MIN_MACS if min_macs is None else min_macs):
        return OneDNNLinearFunction.apply(x, weight, bias)
    return F.linear(x, weight, bias)


class OneDNNLinear(nn.Linear):
    """An ``nn.Linear`` whose fp32 CPU products run in oneDNN (see the module docstring).

    Inside :func:`packed_linears` and without gradients it multiplies by a copy of its weight
    packed once into oneDNN's blocked layout.
    """

    _packed: Tensor | None = None

    def forward(self, x: Tensor) -> Tensor:
        packed = self._packed
        if packed is not None and not torch.is_grad_enabled():
            if packed.dtype == torch.float32 and _eligible(x, self.weight, MIN_MACS):
                return self._packed_product(x, packed, self.bias)
            if packed.dtype == torch.bfloat16 and _bf16_autocast_product(x):
                # What autocast's bf16 linear computes (bf16 operands, bf16 result), with the weight
                # cast and packed once for the whole block instead of reordered on every call.
                bias = None if self.bias is None else self.bias.to(torch.bfloat16)
                return self._packed_product(x.to(torch.bfloat16), packed, bias)
        return onednn_linear(x, self.weight, self.bias)

    def _packed_product(self, x: Tensor, packed: Tensor, bias: Tensor | None) -> Tensor:
        rows = x.reshape(-1, x.shape[-1])
        out = torch.ops.mkldnn._linear_pointwise(rows, packed, bias, "none", [], "")
        return out.view(*x.shape[:-1], self.out_features)


def _bf16_autocast_product(x: Tensor) -> bool:
    """A CPU product that autocast would run in bf16 right now."""
    return (x.device.type == "cpu" and x.numel() > 0 and x.dtype in (torch.float32, torch.bfloat16)
            and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16)


def use_onednn_linears(model: nn.Module) -> int:
    """Run ``model``'s fp32 CPU ``nn.Linear`` layers in oneDNN; returns how many were switched.

    Only modules whose class is exactly ``nn.Linear`` change (subclasses with their own forward,
    e.g. quantised layers, are left alone). Parameters, buffers and ``state_dict`` are untouched,
    so checkpoints, ``deepcopy`` and PEFT wrapping see an ordinary ``nn.Linear``.
    """
    if not onednn_available():
        log.warning("oneDNN is not available in this torch build: linear layers stay on aten.")
        return 0
    switched = 0
    for module in model.modules():
        if (type(module) is nn.Linear and module.weight.device.type == "cpu"
                and module.weight.dtype == torch.float32):
            module.__class__ = OneDNNLinear
            switched += 1
    return switched


def use_aten_linears(model: nn.Module) -> int:
    """Undo :func:`use_onednn_linears`; returns how many modules went back to ``nn.Linear``."""
    switched = 0
    for module in model.modules():
        if type(module) is OneDNNLinear:
            module.__dict__.pop("_packed", None)
            module.__class__ = nn.Linear
            switched += 1
    return switched


@contextmanager
def packed_linears(model: nn.Module, rows: int, fp32: tuple[nn.Module, ...] = ()):
    """Within the block, ``model``'s :class:`OneDNNLinear` layers use a packed copy of their weight
    for gradient-free products (a decode loop: the same weights for every step).

    Entered without autocast, the copies are fp32 and serve fp32 products; entered under CPU
    bf16 autocast, they are bf16 and serve the products autocast runs in bf16 (bf16 operands and
    result, as autocast's own linear). Under another autocast dtype nothing is packed. Modules in
    ``fp32`` are packed in fp32 whatever the autocast state: they serve products run with autocast
    off (the decode loop's LM head under bf16 autocast). ``rows`` is the expected number of input
    rows per product (the batch), a layout hint only: any row count gives the right result.
    Layers whose product at ``rows`` rows is below :data:`MIN_MACS` are not packed (they run in
    aten), nor bf16 copies on a CPU whose oneDNN cannot make them (:func:`bf16_packing_available`).
    The weights must not change inside the block.
    """
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else torch.float32
    keep_fp32 = {id(m) for m in fp32}
    modules = [
        (m, torch.float32 if id(m) in keep_fp32 else dtype) for m in model.modules()
        if type(m) is OneDNNLinear and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
        and rows * m.weight.numel() >= MIN_MACS]
    # bf16 copies only where oneDNN can make them; otherwise those layers run as autocast runs them.
    packable = (torch.float32, torch.bfloat16) if bf16_packing_available() else (torch.float32,)
    modules = [(m, d) for m, d in modules if d in packable]
    try:
        with torch.no_grad():
            for m, d in modules:
                weight = m.weight.detach().to(d)
                m._packed = torch.ops.mkldnn._reorder_linear_weight(weight, max(int(rows), 1))
        yield len(modules)
    finally:
        for m, _ in modules:
            m.__dict__.pop("_packed", None)


def linear_flops(input_shape: tuple[int, ...], weight_shape: tuple[int, ...]) -> int:
    """2·M·K·N for a (..., K) input and an (N, K) weight (M = the product of the leading dims)."""
    if len(input_shape) < 1 or len(weight_shape) != 2:
        return 0
    return 2 * math.prod(input_shape[:-1]) * input_shape[-1] * weight_shape[0]
