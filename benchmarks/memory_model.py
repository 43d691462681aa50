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

``--peak``: the whole predicted peak (tether.plan.memory.predict_peak: activations, LM-head
buffers, the KV cache, autocast's casts and the process itself besides the above) per phase of
``tether bench --model`` runs. ``--measure-sft NAME``: one SFT run (two steps, random init, on
CPU) at a real shape, its measured peak RSS beside the prediction, as JSON (run one at a time:
each is its own process, and the measurement is the process's own high-water mark):

    python benchmarks/memory_model.py --measure-sft smollm2-135m --layers 4 --batch 4 --seq 256
    python benchmarks/memory_model.py --measure-sft qwen2.5-0.5b --lora 16 --grad-ckpt --precision bf16 [--chunked]
    python benchmarks/memory_model.py --measure-head 220   # the LM head alone, in [chunk, V] buffers (0: unchunked)

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


def bench_peak(name: str, algorithm: str = "ppo", lora: int | None = None, grad_ckpt: bool = False,
               precision: str = "fp32", batch: int = 4, prompt: int = 25, response: int = 32,
               decode_copy: int = 0) -> dict:
    """The predicted peak of ``tether bench --model NAME`` (4 prompts of 16-24 tokens + BOS, 32 new
    tokens, 2 minibatches; group.size responses per prompt for the critic-free algorithms; the
    actor's and the critic's updates side by side, cpu.parallel_roles). ``decode_copy``: bytes per
    packed weight of the decode loop's oneDNN linears (4 where cpu.linear_backend=auto picks oneDNN:
    bf16 on an Intel CPU, fp32 and bf16 on AMD; 0 where aten runs)."""
    from tether.bench.shapes import model_config
    from tether.config.stages import default_group_size
    from tether.plan.memory import Shape, Workload, bench_roles, default_logprob_chunk, predict_peak

    shape = Shape.of(model_config(name))
    episodes = batch * default_group_size(algorithm)
    run = Workload(algorithm, micro_batch=episodes // 2, batch=episodes, prompt=prompt, response=response,
                   precision=precision, grad_ckpt=grad_ckpt, logprob_chunk=default_logprob_chunk(shape.vocab),
                   parallel_roles=True, retained_heap=True, decode_copy=decode_copy)
    return predict_peak(shape, bench_roles(shape, algorithm, lora), run)


def peak_table() -> str:
    mb = 2**20
    rows = ["| model | algorithm | training | precision | rollout | log-probs | update | peak (MB) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    cases = [("smollm2-135m", "ppo", None, False, "fp32"), ("smollm2-135m", "ppo", None, False, "bf16"),
             ("qwen2.5-0.5b", "ppo", 16, True, "bf16"), ("qwen2.5-0.5b", "grpo", 16, True, "bf16"),
             ("qwen2.5-1.5b", "ppo", 16, True, "bf16")]
    for name, algorithm, lora, ckpt, precision in cases:
        peak = bench_peak(name, algorithm, lora, ckpt, precision, decode_copy=4 if precision == "bf16" else 0)
        phases = " | ".join(f"{peak['phases'][p]['total'] / mb:.0f}" for p in ("rollout", "logprobs", "update"))
        training = (f"LoRA r={lora}" if lora else "full") + (" + grad-ckpt" if ckpt else "")
        rows.append(f"| {name} | {algorithm} | {training} | {precision} | {phases} | **{peak['total'] / mb:.0f}** |")
    return "\n".join(rows)


def measure_sft(name: str, layers: int | None, batch: int, seq: int, precision: str, lora: int | None,
                grad_ckpt: bool, chunked: bool = False) -> dict:
    """Two SFT steps (tether's own loss, AdamW) at ``name``'s shape, random init on CPU: this
    process's peak RSS and the memory model's prediction for the same run. ``chunked``: the
    next-token log-probs through the chunked fp32 head (tether.models.forward.sequence_logprobs)
    instead of the model's own [B, T, V] logits."""
    import time

    import torch
    from transformers import AutoModelForCausalLM

    from tether.bench.shapes import model_config
    from tether.objectives.shared import sft_batch_loss
    from tether.metrics.memory import own_peak_rss_mb
    from tether.models.forward import logprob_chunk, sequence_logprobs
    from tether.plan.memory import RoleSize, Shape, Workload, predict_peak

    baseline = own_peak_rss_mb()
    config = model_config(name, **({"num_hidden_layers": layers} if layers else {}))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=lora, target_modules="all-linear"))
    if grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if lora:
            model.enable_input_require_grads()
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=1e-5)
    ids = torch.randint(4, config.vocab_size, (batch, seq))
    ones = torch.ones(batch, seq, dtype=torch.long)
    start = time.perf_counter()
    autocast = precision if precision != "fp32" else "none"
    for _ in range(2):
        if chunked:
            loss = -sequence_logprobs(model, ids, ones, autocast).mean()
        else:
            loss = sft_batch_loss(model, {"input_ids": ids, "attention_mask": ones, "loss_mask": ones},
                                  batch * (seq - 1), autocast)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - start
    measured = own_peak_rss_mb()
    n_trained = sum(p.numel() for p in trained)
    size = RoleSize(frozen=sum(p.numel() for p in model.parameters()) - n_trained, trained=n_trained)
    peak = predict_peak(Shape.of(config), {"policy": size},
                        Workload("sft", micro_batch=batch, seq=seq, precision=precision, grad_ckpt=grad_ckpt,
                                 logprob_chunk=logprob_chunk(config.vocab_size) if chunked else None))
    predicted = peak["total"] / 2**20
    return {"model": name, "layers": config.num_hidden_layers, "batch": batch, "seq": seq, "precision": precision,
            "lora": lora or 0, "grad_ckpt": grad_ckpt, "chunked": chunked, "import_baseline_mb": round(baseline, 1),
            "peak_rss_mb": round(measured, 1), "predicted_peak_mb": round(predicted, 1),
            "error": round(predicted / measured - 1, 3), "seconds": round(seconds, 1),
            "predicted_split_mb": {k: round(v / 2**20, 1) for k, v in peak["split"].items()}}


def measure_head(chunk: int, vocab: int = 151_936, hidden: int = 896, positions: int = 1020) -> dict:
    """The LM head's log-probs and their backward alone (tether.models.forward.logprobs_from_hidden,
    a frozen head as under LoRA): this process's peak RSS growth in [positions or chunk, V] fp32
    buffers, the count tether.plan.memory.head_bytes uses."""
    import torch

    from tether.metrics.memory import own_peak_rss_mb
    from tether.models.forward import logprobs_from_hidden

    class Head(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lm_head = torch.nn.Linear(hidden, vocab, bias=False).requires_grad_(False)

        def get_output_embeddings(self):
            return self.lm_head

    model, rows = Head(), positions // 4
    states = torch.randn(4, rows, hidden, requires_grad=True)
    tokens = torch.randint(0, vocab, (4, rows))
    before = own_peak_rss_mb()
    logp, _ = logprobs_from_hidden(model, states, tokens, 0.7, chunk=chunk)
    forward = own_peak_rss_mb() - before
    logp.sum().backward()
    buffer = min(chunk or positions, positions) * vocab * 4 / 2**20
    return {"chunk": chunk, "buffer_mb": round(buffer, 1), "forward_buffers": round(forward / buffer, 2),
            "backward_buffers": round((own_peak_rss_mb() - before) / buffer, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=0, help="Also print GB per GPU on this many GPUs (ddp, fsdp).")
    parser.add_argument("--peak", action="store_true", help="Print the predicted peak of tether bench --model runs.")
    parser.add_argument("--measure-sft", metavar="NAME", help="Measure one SFT run's peak RSS at this shape.")
    parser.add_argument("--layers", type=int, default=None, help="--measure-sft: this many decoder layers.")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    parser.add_argument("--lora", type=int, default=None)
    parser.add_argument("--grad-ckpt", action="store_true")
    parser.add_argument("--chunked", action="store_true", help="--measure-sft: log-probs through the chunked head.")
    parser.add_argument("--measure-head", type=int, metavar="CHUNK", default=None,
                        help="Measure the LM head's buffers alone, CHUNK positions at a time (0: all at once).")
    args = parser.parse_args()
    if args.measure_head is not None:
        import json

        print(json.dumps(measure_head(args.measure_head)))
        return
    if args.measure_sft:
        import json

        print(json.dumps(measure_sft(args.measure_sft, args.layers, args.batch, args.seq, args.precision, args.lora,
                                     args.grad_ckpt, args.chunked)))
        return
    if args.peak:
        print("Predicted peak (MB = 2**20 B) per phase of `tether bench --model` (4 prompts, 32 new tokens; oneDNN's "
              "packed bf16 decode as on an Intel CPU):\n")
        print(peak_table())
        return
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
