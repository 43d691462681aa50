"""`tether demo`: the whole pipeline on the embedded arithmetic task."""

from __future__ import annotations

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.common.errors import TetherError

STAGE_NAMES = ("sft", "rm", DEFAULT_ALGORITHM)


def register(sub) -> None:
    p = sub.add_parser(
        "demo",
        help="Build the arithmetic demo task and run SFT -> reward model -> PPO on it.",
        description="Build the embedded arithmetic task (no download), run SFT, the reward model and "
        "PPO from the presets in configs/demo/, evaluate every stage on held-out prompts, and write "
        "DIR/summary.json. Each stage's final model is a Hugging Face checkpoint in DIR/sft, DIR/rm, DIR/ppo.",
    )
    p.add_argument("--out", default="runs/demo", help="Run directory DIR (default: runs/demo).")
    p.add_argument("--seed", type=int, default=0, help="Seed for the task and every stage (default 0).")
    p.add_argument("--beta", type=float, default=None,
                   help="Fixed KL coefficient for PPO (default: the preset's). --beta 0 removes the KL leash.")
    p.add_argument("--iterations", type=int, default=None, help="PPO iterations (default: the preset's).")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="STAGE:KEY=VALUE",
                   help="Override a stage's config key, e.g. --set ppo:optim.lr=5e-5 (repeatable).")
    p.add_argument("--lora", action="store_true",
                   help="Train LoRA adapters in every stage (tether.demo.LORA: ranks and learning rates); each "
                        "final model is saved merged, with its adapter in adapter/.")
    p.add_argument("--beside", default=None, metavar="DIR",
                   help="Print this run's summary beside another demo run's (e.g. --lora --beside runs/demo).")


def parse_sets(sets: list[str], names=STAGE_NAMES, what: str = "STAGE") -> dict[str, list[str]]:
    """``--set NAME:KEY=VALUE`` items by NAME (a stage of the demo, a method of `tether compare`)."""
    overrides: dict[str, list[str]] = {}
    for item in sets:
        stage, sep, kv = item.partition(":")
        if not sep or stage not in names or "=" not in kv:
            raise TetherError(f"--set '{item}': expected {what}:KEY=VALUE with {what} one of {', '.join(names)}.")
        overrides.setdefault(stage, []).append(kv)
    return overrides


def run(args) -> int:
    from tether.demo import format_summary, run_demo
    from tether.common.outputs import check_output_dir

    overrides = parse_sets(args.sets)
    check_output_dir(args.out, "--out")
    if args.iterations is not None:
        overrides.setdefault(DEFAULT_ALGORITHM, []).append(f"rl.iterations={args.iterations}")
    beside = None
    if args.beside:
        import json
        from pathlib import Path

        path = Path(args.beside) / "summary.json"
        if not path.is_file():
            raise TetherError(f"--beside '{args.beside}': no summary.json there; run `tether demo --out "
                              f"{args.beside}` first.")
        beside = json.loads(path.read_text())
    summary = run_demo(args.out, seed=args.seed, beta=args.beta, overrides=overrides, lora=args.lora)
    print(format_summary(summary, beside))
    print(f"\nsummary: {args.out}/summary.json")
    return 0
