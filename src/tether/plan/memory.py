"""The memory model of the LoRA work: bytes of weights, gradients and optimiser state per role.

Activations are left out (they scale with batch × sequence, and gradient checkpointing cuts
them). Per parameter:

| weights dtype | trained parameter | frozen parameter |
| --- | --- | --- |
| float32 (fp32 weights, gradients and AdamW's two moments) | 4 + 4 + 8 = 16 B | 4 B |
| bfloat16 / float16 (half weights and gradients, fp32 AdamW moments) | 2 + 2 + 8 = 12 B | 2 B |

``run.precision=bf16`` autocasts over fp32 master weights: it is the float32 row.
"""

from __future__ import annotations

from dataclasses import dataclass

#: model.dtype -> (bytes per trained parameter, bytes per frozen parameter)
BYTES_PER_PARAM = {"float32": (16, 4), "bfloat16": (12, 2), "float16": (12, 2)}


@dataclass(frozen=True)
class RoleSize:
    """One role's parameters: ``frozen`` ones (a LoRA base, a frozen model) and ``trained`` ones
    (every weight in full training; the adapters, plus a head trained in full, with LoRA)."""

    frozen: int = 0
    trained: int = 0


def role_bytes(size: RoleSize, dtype: str = "float32") -> int:
    """Weights + gradients + AdamW state of one role, in bytes."""
    trained, frozen = BYTES_PER_PARAM[dtype]
    return size.trained * trained + size.frozen * frozen


def per_rank_bytes(roles: dict[str, RoleSize], dtype: str, world: int, strategy: dict[str, str]) -> dict[str, int]:
    """Bytes per rank of each role on ``world`` ranks: ``strategy[role]`` = ``fsdp`` shards a trained
    role (weights, gradients and optimiser state, a LoRA base included) over the ranks; ``ddp`` and
    frozen roles keep a whole copy on every rank."""
    out = {}
    for name, size in roles.items():
        whole = role_bytes(size, dtype)
        out[name] = -(-whole // world) if size.trained and strategy.get(name) == "fsdp" else whole
    return out


def sampling_peak_bytes(actor_params: int, dtype: str, world: int) -> int:
    """What FSDP adds while sampling: the rest of the actor's weights, gathered for the rollout."""
    return actor_params * BYTES_PER_PARAM[dtype][1] * (world - 1) // world


def human_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KB'`` (powers of 1000, as GPU memory is quoted)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
