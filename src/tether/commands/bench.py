"""`tether bench`: seconds per PPO iteration, per phase, FLOPs and MFU on random-init Llamas."""

from __future__ import annotations

import json


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="Time PPO iterations on random-init Llama models; print JSON (logs on stderr).",
        description=(
            "Run the benchmark configuration of issue 6 (16 prompts, 32 new tokens, 4 epochs x 2 "
            "minibatches) on random-init Llama models and print seconds per iteration, per phase, "
            "tokens/s, peak RSS, FLOPs and the fraction of this machine's matmul peak, as JSON."
        ),
    )
    p.add_argument("--size", choices=["tiny", "small", "medium", "large", "micro"], default="small",
                   help="tiny h128 L2 (1.05M), small h256 L4 (9.4M), medium h512 L4 (21M), large h768 L12 (116M); "
                        "micro is for tests.")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16 = autocast with fp32 master weights (ppo.autocast=bf16).")
    p.add_argument("--batch", type=int, default=16, help="Prompts per iteration.")
    p.add_argument("--response-length", type=int, default=32, help="New tokens per response (always generated).")
    p.add_argument("--epochs", type=int, default=4, help="PPO epochs per iteration (2 minibatches each).")
    p.add_argument("--iterations", type=int, default=8, help="Iterations; the first is a warm-up.")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default.")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1,
                   help="Run the benchmark this many times (fresh models each) and report medians over runs.")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="LoRA adapters of rank R on the actor and the critic (the reference is then the actor's "
                        "base with the adapters off); 0 = full-parameter training.")
    p.add_argument("--grad-ckpt", action="store_true", help="Gradient checkpointing on the actor and the critic.")
    p.add_argument("--profile", action="store_true",
                   help="One extra iteration with the update under torch.profiler: matmul vs other seconds.")
    p.add_argument("--no-peak", action="store_true", help="Skip measuring the matmul peak (no MFU).")
    p.add_argument("--scaling", action="store_true",
                   help="Seconds/iteration for response lengths 32/64/128/256 and batches 16/32/64.")
    p.add_argument("--scaling-iterations", type=int, default=3, help="Iterations per scaling point.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Extra PPO config overrides, e.g. ppo.autocast=bf16.")


def run(args) -> int:
    import os

    from tether.distributed import DistributedSession

    check_lengths(args)
    # Under torchrun every rank runs the bench's PPO iterations data parallel (gloo on the CPU);
    # rank 0 reports. It measures the distributed path's overhead, docs/distributed.md.
    with DistributedSession(device="cpu"):
        report = _run(args)
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(report, indent=2))
    return 0


def _run(args) -> dict:
    from tether.bench.runner import run_repeated, run_scaling

    if args.lora:
        args.overrides = [f"lora.r={args.lora}", f"critic.lora.r={args.lora}", *args.overrides]
    if args.grad_ckpt:
        args.overrides = ["gradient_checkpointing=true", "critic.gradient_checkpointing=true", *args.overrides]
    if args.scaling:
        report = run_scaling(args.size, args.precision, args.epochs, args.threads, args.scaling_iterations,
                             overrides=args.overrides, repeats=args.repeat)
    else:
        report = run_repeated(args.repeat, size=args.size, precision=args.precision, batch=args.batch,
                              response_length=args.response_length, epochs=args.epochs, threads=args.threads,
                              iterations=args.iterations, seed=args.seed, measure_peak=not args.no_peak,
                              overrides=args.overrides, profile=args.profile)
    return report


def check_lengths(args) -> None:
    """--response-length fits the bench models' context beside the longest prompt (and BOS)."""
    from tether.bench.setup import MAX_POSITIONS, PROMPT_WORDS
    from tether.errors import ConfigError

    room = MAX_POSITIONS - PROMPT_WORDS[1] - 1
    if not 1 <= args.response_length <= room:
        raise ConfigError(f"--response-length must be from 1 to {room} (the bench models' {MAX_POSITIONS}-position "
                          f"context minus the longest prompt, {PROMPT_WORDS[1]} words and BOS), "
                          f"got {args.response_length}.")
