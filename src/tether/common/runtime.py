"""Where tensors live and in what precision, and which process this is among how many.

- :func:`resolve_device`: ``run.device`` (``auto | cpu | cuda | cuda:N | mps``) to a
  ``torch.device``; asking for a device this machine does not have is a :class:`ConfigError`.
- :class:`Precision`: ``run.precision`` (``fp32 | bf16 | fp16``) as one policy: fp32 master
  weights and optimiser state, the model's matmuls under autocast, a gradient scaler for fp16.
- Rank helpers (:func:`rank`, :func:`world_size`, :func:`is_main`, :func:`all_reduce_mean`,
  :func:`rank_seed`): what a data-parallel run needs from torch.distributed, and no-ops in one
  process, so the loops are written once for both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from tether.config.common import check_device_spec
from tether.common.errors import ConfigError

def resolve_device(spec: str, key: str = "run.device") -> torch.device:
    """``auto`` = CUDA when available, else CPU. A device that is not here is a ConfigError."""
    check_device_spec(spec, key)
    what = key if key.startswith("--") else f"Config key '{key}'"
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"{what} = '{spec}', but this machine has no CUDA device (or this torch build has "
                "no CUDA support: torch.cuda.is_available() is false). Use cpu or auto, or install a "
                "CUDA build of torch on a machine with an NVIDIA GPU."
            )
        index = int(spec.split(":")[1]) if ":" in spec else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(f"{what} = '{spec}', but this machine has "
                              f"{torch.cuda.device_count()} CUDA device(s) (cuda:0 .. cuda:{torch.cuda.device_count() - 1}).")
        return torch.device("cuda", index)
    if spec == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError(f"{what} = 'mps', but Apple's MPS backend is not available here. "
                          "Use run.device=cpu or auto.")
    return torch.device(spec)


AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclass(frozen=True)
class Precision:
    """``run.precision``: fp32, or bf16/fp16 autocast over fp32 master weights.

    ``autocast`` is the mode the forward helpers take ("none", "bf16" or "fp16"); fp16 also
    needs a gradient scaler (its range underflows small gradients), which the training engine
    owns.
    """

    name: str = "fp32"

    def __post_init__(self):
        if self.name not in PRECISIONS:
            raise ConfigError(f"Unknown precision {self.name!r}: expected one of {list(PRECISIONS)}.")

    @property
    def autocast(self) -> str:
        return "none" if self.name == "fp32" else self.name

    @property
    def dtype(self) -> torch.dtype | None:
        """The autocast dtype, or None for fp32."""
        return AUTOCAST_DTYPES.get(self.name)

    @property
    def needs_scaler(self) -> bool:
        return self.name == "fp16"

    def context(self, device: torch.device):
        """``torch.autocast`` on ``device`` at this precision, or a no-op for fp32."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device.type, dtype=self.dtype)


# -- ranks: no-ops in one process, torch.distributed when it is initialised --------------------


def _distributed() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def rank() -> int:
    return torch.distributed.get_rank() if _distributed() else 0


def world_size() -> int:
    return torch.distributed.get_world_size() if _distributed() else 1


def is_main() -> bool:
    """This process writes the run directory, logs and progress bars (rank 0)."""
    return rank() == 0


def all_reduce_mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of ``value`` over ranks (``value`` itself in one process)."""
    if not _distributed():
        return value
    out = value.detach().clone()
    torch.distributed.all_reduce(out, op=torch.distributed.ReduceOp.SUM)
    return out / world_size()


def rank_seed(seed: int, iteration: int = 0, rank_index: int | None = None) -> int:
    """The seed of (``seed``, ``iteration``, rank): every rank draws its own numbers, reproducibly.

    Rank 0 of iteration ``i`` gets the same seed a one-process run uses, so a single process and
    the first rank of a data-parallel run agree.
    """
    r = rank() if rank_index is None else rank_index
    base = (seed * 1_000_003 + iteration * 7919) % (2**63 - 1)
    return (base + r * 104_729) % (2**63 - 1)
