"""PPO's memory on paper: the four roles' weights, gradients and optimiser state for real model
sizes, full-parameter against LoRA, fp32 against bf16 weights. Activations are left out (they
scale with batch × sequence and gradient checkpointing cuts them). Prints a markdown table.

    python benchmarks/memory_model.py [--rank 16] [--gpus 8]

The formula is tether.plan.memory's (the one `--dry-run` prints per role), per parameter (B = bytes):

| recipe | trained parameter | frozen parameter |
| --- | --- | --- |
| fp32 (tether's default: fp32 weights, gradients, AdamW's two moments) | 4 + 4 + 8 = 16 B | 4 B |
| bf16 weights (bf16 weights and gradients, fp32 AdamW moments) | 2 + 2 + 8 = 12 B | 2 B |

Full-parameter PPO trains the actor and the critic and keeps a frozen reference and reward
model: 2 × N × 16 + 2 × N × 4 (fp32). With LoRA on the actor and the critic, their bases are
frozen, only the adapters (r × (in + out) per adapted linear layer, every linear layer of the
decoder) train, the reference is the actor's base with the adapters off and the reward model
the critic's (the critic starts from it): 2 × N × 4 + 2 × A × 16. ``run.precision=bf16`` (autocast) keeps fp32 master weights: it is the fp32 row;
the bf16 row is ``model.dtype=bfloat16``.

Per GPU under data parallel (``--gpus N``, docs/distributed.md): ``ddp`` keeps every role whole
on every GPU (the totals above). ``fsdp`` shards the trained models (the actor and the critic:
weights, gradients and optimiser state, LoRA bases included) over the N GPUs and keeps the
frozen reference and reward model whole on each; sampling then gathers the whole actor for the
rollout (its weights once more, at the weights' bytes per parameter), the peak column.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from tether.plan.memory import RoleSize, per_rank_bytes, role_bytes, sampling_peak_bytes


@dataclass(frozen=True)
class Arch:
    name: str
    hidden: int
    layers: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def linears(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer of one decoder layer (q, k, v, o, gate, up, down)."""
        h, kv = self.hidden, self.kv_heads * self.head_dim
        return [(h, h), (h, kv), (h, kv), (h, h), (h, self.ffn), (h, self.ffn), (self.ffn, h)]

    def trunk(self) -> int:
        """Decoder parameters: embeddings, layers (linears, q/k/v biases as in Qwen2, two norms), final norm."""
        kv = self.kv_heads * self.head_dim
        per_layer = sum(i * o for i, o in self.linears()) + (self.hidden + 2 * kv) + 2 * self.hidden
        return self.vocab * self.hidden + self.layers * per_layer + self.hidden

    def causal_lm(self) -> int:
        return self.trunk() + (0 if self.tied else self.vocab * self.hidden)

    def scalar_model(self) -> int:
        return self.trunk() + self.hidden  # the score head, hidden × 1

    def lora(self, rank: int) -> int:
        return self.layers * sum(rank * (i + o) for i, o in self.linears())


QWEN = [
    Arch("Qwen2.5-0.5B", hidden=896, layers=24, ffn=4864, heads=14, kv_heads=2, vocab=151936, tied=True),
    Arch("Qwen2.5-7B", hidden=3584, layers=28, ffn=18944, heads=28, kv_heads=4, vocab=152064, tied=False),
]
RECIPES = {"fp32": "float32", "bf16 weights": "bfloat16"}  # recipe -> model.dtype (tether.plan.memory's table)


def ppo_sizes(arch: Arch, rank: int | None) -> dict[str, RoleSize]:
    """Parameters per role: actor, reference, critic (from the reward model), reward model."""
    lm, scalar = arch.causal_lm(), arch.scalar_model()
    if rank is None:
        return {"actor": RoleSize(trained=lm), "reference": RoleSize(frozen=lm), "critic": RoleSize(trained=scalar),
                "reward": RoleSize(frozen=scalar)}
    adapters = arch.lora(rank)
    head = arch.hidden  # the critic's head trains in full beside its adapters (its base keeps the rest)
    # The reference is the actor's base and the reward model the critic's (adapters off).
    return {"actor": RoleSize(frozen=lm, trained=adapters), "reference": RoleSize(),
            "critic": RoleSize(frozen=scalar, trained=adapters + head), "reward": RoleSize()}


def ppo_bytes(arch: Arch, recipe: str, rank: int | None) -> dict:
    """Bytes per role: actor, reference, critic (from the reward model), reward model."""
    return {name: role_bytes(size, RECIPES[recipe]) for name, size in ppo_sizes(arch, rank).items()}


def per_gpu_bytes(arch: Arch, recipe: str, rank: int | None, gpus: int, strategy: str) -> tuple[float, float]:
    """(steady bytes per GPU, peak while sampling) for PPO on ``gpus`` GPUs with ``strategy``."""
    per_gpu = per_rank_bytes(ppo_sizes(arch, rank), RECIPES[recipe], gpus, {"actor": strategy, "critic": strategy})
    steady = sum(per_gpu.values())
    if strategy == "ddp":
        return steady, steady
    return steady, steady + sampling_peak_bytes(arch.causal_lm(), RECIPES[recipe], gpus)


def gpu_table(rank: int, gpus: int) -> str:
    gb = 1e9
    rows = [f"| model | recipe | training | ddp per GPU | fsdp per GPU | fsdp peak while sampling |",
            "| --- | --- | --- | --- | --- | --- |"]
    for arch in QWEN:
        for recipe in RECIPES:
            for label, r in (("full", None), (f"LoRA r={rank}", rank)):
                ddp, _ = per_gpu_bytes(arch, recipe, r, gpus, "ddp")
                steady, peak = per_gpu_bytes(arch, recipe, r, gpus, "fsdp")
                rows.append(f"| {arch.name} | {recipe} | {label} | {ddp / gb:.1f} | {steady / gb:.1f} | {peak / gb:.1f} |")
    return "\n".join(rows)


def table(rank: int) -> str:
    gb = 1e9
    rows = ["| model | parameters (LM) | recipe | training | actor | reference | critic | reward | total |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for arch in QWEN:
        for recipe in RECIPES:
            for label, r in (("full", None), (f"LoRA r={rank}", rank)):
                b = ppo_bytes(arch, recipe, r)
                cells = " | ".join(f"{b[k] / gb:.2f}" for k in ("actor", "reference", "critic", "reward"))
                rows.append(f"| {arch.name} | {arch.causal_lm() / 1e9:.2f} B | {recipe} | {label} | {cells} | "
                            f"**{sum(b.values()) / gb:.1f}** |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=0, help="Also print GB per GPU on this many GPUs (ddp, fsdp).")
    args = parser.parse_args()
    print(f"GB per role (weights + gradients + optimiser state; activations excluded); LoRA r={args.rank} on every "
          "linear layer of the decoder.\n")
    print(table(args.rank))
    for arch in QWEN:
        print(f"\n{arch.name}: {arch.causal_lm():,} parameters (causal LM), {arch.scalar_model():,} (scalar model), "
              f"{arch.lora(args.rank):,} LoRA r={args.rank} adapter parameters "
              f"({arch.lora(args.rank) / arch.causal_lm():.2%}).")
    if args.gpus:
        print(f"\nGB per GPU on {args.gpus} GPUs (weights + gradients + optimiser state; activations excluded):\n")
        print(gpu_table(args.rank, args.gpus))


if __name__ == "__main__":
    main()
