"""`tether bench`: seconds per PPO iteration, per phase, FLOPs and MFU on random-init Llamas, or on
real architectures' shapes with random weights (``--model``, :mod:`tether.bench.shapes`); with
``--stage``, one stage's step padded vs packed (:mod:`tether.bench.padding`)."""

from __future__ import annotations

import json

from tether.registry.algorithms import DEFAULT_ALGORITHM


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="Time PPO iterations on random-init Llama models; print JSON (logs on stderr).",
        description=(
            "Run the benchmark configuration of docs/performance.md (16 prompts, 32 new tokens, 4 epochs x 2 "
            "minibatches) on random-init Llama models and print seconds per iteration, per phase, "
            "tokens/s, peak RSS, FLOPs and the fraction of this machine's matmul peak, as JSON. "
            "With --model: a real architecture's shape (vocabulary included) with random weights and a "
            "tokenizer built to its vocabulary size; defaults then 4 prompts of 16-24 tokens, 32 new "
            "tokens, 1 epoch x 2 minibatches."
        ),
    )
    p.add_argument("--size", choices=["tiny", "small", "medium", "large", "micro"], default=None,
                   help="tiny h128 L2 (1.05M), small h256 L4 (9.4M, the default), medium h512 L4 (21M), "
                        "large h768 L12 (116M); micro is for tests.")
    p.add_argument("--model", default=None, metavar="NAME|PATH",
                   help="Instead of --size: smollm2-135m, qwen2.5-0.5b, qwen2.5-1.5b or llama-3.2-1b (the public "
                        "configs' shapes, random init), or a local directory with a config.json (random init from "
                        "it; its tokenizer if it has one, else one built to its vocab_size).")
    p.add_argument("--write-model", default=None, metavar="DIR",
                   help="With --model: write the random-init checkpoint and its tokenizer to DIR (a new or empty "
                        "directory) and exit, e.g. to stand in for a hub id in model.name_or_path=DIR.")
    p.add_argument("--algorithm", default=DEFAULT_ALGORITHM,
                   help="ppo (default) or a critic-free algorithm of tether.algorithms (grpo, rloo, reinforce_pp; "
                        "no critic, group.size responses per prompt).")
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda, cuda:N or auto (CUDA when available). A device this machine does not "
                        "have is an error.")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                   help="bf16 = autocast with fp32 master weights (ppo.autocast=bf16).")
    p.add_argument("--batch", type=int, default=None, help="Prompts per iteration (16; 4 with --model).")
    p.add_argument("--response-length", type=int, default=None,
                   help="New tokens per response, always generated (32).")
    p.add_argument("--epochs", type=int, default=None,
                   help="PPO epochs per iteration, 2 minibatches each (4; 1 with --model).")
    p.add_argument("--iterations", type=int, default=8,
                   help="Iterations; the first is a warm-up. With --stage: timed steps per mode, after a "
                        "warm-up step of each.")
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 keeps torch's default.")
    p.add_argument("--max-staleness", type=int, default=0, metavar="K",
                   help="rollout.max_staleness: 0 (default) = the synchronous loop; K >= 1 = the next rollouts are "
                        "sampled by a worker process (rollout.worker_threads threads, 1 by default) while the "
                        "trainer (--threads) trains.")
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
    p.add_argument("--stage", default=None, metavar="sft|rm|dpo|ALGORITHM",
                   help="Instead of PPO iterations: this stage's step (sft, rm, dpo or a registered algorithm) with padded and with packed (padding-free) "
                        "batches, interleaved in one run; prints padded, packed and speedup (packed over padded "
                        "tokens per second). --batch is then rows per step (16: sequences, pairs, or prompts times "
                        "the group), --iterations timed steps per mode after a warm-up of each.")
    p.add_argument("--lengths", choices=["demo", "longtail"], default=None,
                   help="With --stage: the rows' lengths; demo (the default: the demo task's) or longtail "
                        "(prompt and response lengths log-normal, median 128, sigma 1, clipped to 8-1024 tokens).")
    p.add_argument("--out", default=None, metavar="FILE", help="With --stage: also write the JSON to FILE.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="Extra PPO config overrides, e.g. ppo.autocast=bf16 (with --stage: that stage's config, "
                        "e.g. rl.micro_batch_tokens=4096).")


#: (batch, response length, epochs) without and with --model (a real shape costs ~10-100x per token).
SIZE_DEFAULTS = (16, 32, 4)
MODEL_DEFAULTS = (4, 32, 1)
MODEL_PROMPT_TOKENS = (16, 24)


def run(args) -> int:
    import os

    from tether.distributed import DistributedSession
    from tether.common.runtime import resolve_device

    if getattr(args, "stage", None) is not None:
        return run_stage_bench(args)
    source = check_args(args)
    if args.write_model:
        from tether.bench.shapes import write_model

        print(write_model(source, args.write_model, args.seed))
        return 0
    device = resolve_device(args.device, "--device")
    check_lengths(args, source)
    # Under torchrun every rank runs the bench's PPO iterations data parallel (gloo on the CPU);
    # rank 0 reports. It measures the distributed path's overhead, docs/distributed.md.
    with DistributedSession(device=args.device):
        report = _run(args, source, device)
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(report, indent=2))
    return 0


def check_args(args):
    """Flags that contradict each other, an unknown algorithm or model: one paragraph, before any
    work. Fills the defaults that depend on --model; returns its ModelSource (None with --size)."""
    from tether.algorithms import ALGORITHMS
    from tether.common.errors import ConfigError

    if getattr(args, "lengths", None) is not None or getattr(args, "out", None) is not None:
        raise ConfigError("--lengths and --out go with --stage (the padded vs packed step bench).")
    if args.algorithm not in ALGORITHMS:
        raise ConfigError(f"--algorithm {args.algorithm!r}: expected one of {', '.join(ALGORITHMS)}.")
    if args.model is not None and args.size is not None:
        raise ConfigError(f"--model {args.model!r} and --size {args.size!r} both name the models; give one.")
    if args.write_model and args.model is None:
        raise ConfigError("--write-model needs --model (the shape to write).")
    if args.scaling and (args.model is not None or args.algorithm != DEFAULT_ALGORITHM or args.device != "cpu"):
        raise ConfigError("--scaling runs PPO at a --size on the CPU; it does not take --model, --algorithm or "
                          "--device.")
    defaults = SIZE_DEFAULTS if args.model is None else MODEL_DEFAULTS
    for key, value in zip(("batch", "response_length", "epochs"), defaults):
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.size = args.size or ("small" if args.model is None else None)
    if args.model is None:
        return None
    from tether.bench.shapes import resolve_model

    return resolve_model(args.model)


def _run(args, source=None, device=None) -> dict:
    from tether.bench.runner import run_repeated, run_scaling
    from tether.config.stages import algorithm_needs_critic

    critic = algorithm_needs_critic(args.algorithm)
    if args.max_staleness:
        args.overrides = [f"rollout.max_staleness={args.max_staleness}", *args.overrides]
    if args.lora:
        args.overrides = [f"lora.r={args.lora}", *([f"critic.lora.r={args.lora}"] if critic else []), *args.overrides]
    if args.grad_ckpt:
        args.overrides = ["gradient_checkpointing=true", *(["critic.gradient_checkpointing=true"] if critic else []),
                          *args.overrides]
    if args.scaling:
        report = run_scaling(args.size, args.precision, args.epochs, args.threads, args.scaling_iterations,
                             overrides=args.overrides, repeats=args.repeat)
    else:
        report = run_repeated(args.repeat, size=args.size, precision=args.precision, batch=args.batch,
                              response_length=args.response_length, epochs=args.epochs, threads=args.threads,
                              iterations=args.iterations, seed=args.seed, measure_peak=not args.no_peak,
                              overrides=args.overrides, profile=args.profile, model=source,
                              algorithm=args.algorithm, device=str(device or "cpu"),
                              prompt_tokens=MODEL_PROMPT_TOKENS)
    return report


def check_lengths(args, source=None) -> None:
    """--response-length fits the bench models' context beside the longest prompt (and BOS)."""
    from tether.bench.setup import MAX_POSITIONS, PROMPT_WORDS
    from tether.common.errors import ConfigError

    if source is not None:
        positions = getattr(source.config, "max_position_embeddings", None) or MAX_POSITIONS
        room = positions - MODEL_PROMPT_TOKENS[1]
        if not 1 <= args.response_length <= room:
            raise ConfigError(f"--response-length must be from 1 to {room} (--model {args.model!r}'s {positions}-"
                              f"position context minus the longest prompt, {MODEL_PROMPT_TOKENS[1]} tokens), "
                              f"got {args.response_length}.")
        return
    room = MAX_POSITIONS - PROMPT_WORDS[1] - 1
    if not 1 <= args.response_length <= room:
        raise ConfigError(f"--response-length must be from 1 to {room} (the bench models' {MAX_POSITIONS}-position "
                          f"context minus the longest prompt, {PROMPT_WORDS[1]} words and BOS), "
                          f"got {args.response_length}.")


#: Flags of the PPO iteration bench that --stage does not take (flag, attribute, its default).
ITERATION_ONLY = (("--model", "model", None), ("--write-model", "write_model", None),
                  ("--algorithm", "algorithm", DEFAULT_ALGORITHM), ("--response-length", "response_length", None),
                  ("--epochs", "epochs", None), ("--repeat", "repeat", 1), ("--lora", "lora", 0),
                  ("--grad-ckpt", "grad_ckpt", False), ("--profile", "profile", False),
                  ("--scaling", "scaling", False), ("--max-staleness", "max_staleness", 0))


def run_stage_bench(args) -> int:
    """``--stage``: padded vs packed steps of one stage (:func:`tether.bench.padding.run_padding_bench`)."""
    from tether.bench.padding import run_padding_bench
    from tether.common.errors import ConfigError
    from tether.common.outputs import check_output_file
    from tether.common.runtime import resolve_device

    from tether.bench.padding import stages

    if args.stage not in stages():
        raise ConfigError(f"--stage {args.stage!r}: expected one of {', '.join(stages())}.")
    given = [flag for flag, attr, default in ITERATION_ONLY if getattr(args, attr) != default]
    if given:
        raise ConfigError(f"--stage {args.stage} times one stage's step padded vs packed on --size models; it does "
                          f"not take {', '.join(given)} (flags of the PPO iteration bench).")
    if args.batch is not None and args.batch < 1:
        raise ConfigError(f"--batch must be at least 1 (rows per step), got {args.batch}.")
    if args.iterations < 1:
        raise ConfigError(f"--iterations must be at least 1 (timed steps per mode), got {args.iterations}.")
    out = check_output_file(args.out, "--out", example="bench.json") if args.out else None
    device = resolve_device(args.device, "--device")
    report = run_padding_bench(args.stage, args.lengths or "demo", args.size or "small", rows=args.batch,
                               iterations=args.iterations, seed=args.seed, threads=args.threads,
                               precision=args.precision, device=str(device), overrides=list(args.overrides))
    text = json.dumps(report, indent=2)
    if out is not None:
        out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0
