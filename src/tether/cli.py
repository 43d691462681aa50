"""`tether demo | sft | rm | ppo`: the command line.

Stage commands take ``--config FILE`` (a YAML preset) and dotted overrides
(``optim.lr=1e-4``). A :class:`~tether.errors.TetherError` prints one paragraph and exits 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap

from tether.config import PPOConfig, RewardModelConfig, SFTConfig, describe, load_config
from tether.errors import TetherError

STAGES = {
    "sft": (SFTConfig, "Supervised fine-tuning on demonstrations (loss on response tokens only)."),
    "rm": (RewardModelConfig, "Train a Bradley-Terry reward model on preference pairs."),
    "ppo": (PPOConfig, "PPO-RLHF: actor, reference, reward model and critic."),
}


def _options_epilog(cls) -> str:
    lines = ["config keys (set in the YAML or as key=value overrides):"]
    for key, default, help_text in describe(cls):
        lines.append(f"  {key} (default {default})")
        lines.extend(textwrap.wrap(help_text, 76, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="PPO-based RLHF that runs on a laptop CPU.")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log debug messages.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="Build the arithmetic demo task and run SFT -> reward model -> PPO on it.",
        description="Build the embedded arithmetic task (no download), run SFT, the reward model and "
        "PPO from the presets in configs/demo/, evaluate every stage on held-out prompts, and write "
        "DIR/summary.json. Each stage's final model is a Hugging Face checkpoint in DIR/sft, DIR/rm, DIR/ppo.",
    )
    demo.add_argument("--out", default="runs/demo", help="Run directory DIR (default: runs/demo).")
    demo.add_argument("--seed", type=int, default=0, help="Seed for the task and every stage (default 0).")
    demo.add_argument("--beta", type=float, default=None,
                      help="Fixed KL coefficient for PPO (default: the preset's). --beta 0 removes the KL leash.")
    demo.add_argument("--iterations", type=int, default=None, help="PPO iterations (default: the preset's).")
    demo.add_argument("--set", dest="sets", action="append", default=[], metavar="STAGE:KEY=VALUE",
                      help="Override a stage's config key, e.g. --set ppo:ppo.actor_lr=5e-5 (repeatable).")

    for name, (cls, help_text) in STAGES.items():
        p = sub.add_parser(name, help=help_text, description=help_text, epilog=_options_epilog(cls),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--config", default=None, help="YAML preset, e.g. configs/demo/%s.yaml." % name)
        p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Dotted config overrides.")
        p.add_argument("--print-config", action="store_true", help="Print the resolved config and exit.")
    return parser


def _demo(args) -> int:
    from tether.demo import format_summary, run_demo

    overrides: dict[str, list[str]] = {}
    for item in args.sets:
        stage, sep, kv = item.partition(":")
        if not sep or stage not in STAGES:
            raise TetherError(f"--set '{item}': expected STAGE:KEY=VALUE with STAGE one of sft, rm, ppo.")
        overrides.setdefault(stage, []).append(kv)
    if args.iterations is not None:
        overrides.setdefault("ppo", []).append(f"ppo.iterations={args.iterations}")
    summary = run_demo(args.out, seed=args.seed, beta=args.beta, overrides=overrides)
    print(format_summary(summary))
    print(f"\nsummary: {args.out}/summary.json")
    return 0


def _stage(args) -> int:
    import yaml

    from tether.config import to_dict

    cls, _ = STAGES[args.command]
    cfg = load_config(cls, args.config, args.overrides)
    if args.print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    if args.command == "sft":
        from tether.loops.sft import run_sft

        result = run_sft(cfg)
    elif args.command == "rm":
        from tether.loops.reward_model import run_reward_model

        result = run_reward_model(cfg)
    else:
        from tether.loops.ppo import run_ppo

        result = run_ppo(cfg)
        result = result["history"][-1] if result["history"] else {}
    printable = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) or v is None}
    print(json.dumps(printable, indent=2))
    print(f"saved: {cfg.run.out}", file=sys.stderr)
    return 0


def quiet_libraries(verbose: bool) -> None:
    """transformers' per-load progress bars and init notes drown tether's own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if not verbose:
        hf_logging.set_verbosity_error()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_libraries(args.verbose)
    try:
        if args.command == "demo":
            return _demo(args)
        return _stage(args)
    except TetherError as err:
        print(f"tether {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tether {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
