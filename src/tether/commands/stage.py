"""`tether sft | rm | ppo`: run one stage from a YAML preset and dotted overrides."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap


def _config_class(name: str):
    from tether.config import PPOConfig, RewardModelConfig, SFTConfig

    return {"sft": SFTConfig, "rm": RewardModelConfig, "ppo": PPOConfig}[name]


HELP = {
    "sft": "Supervised fine-tuning on demonstrations (loss on response tokens only).",
    "rm": "Train a Bradley-Terry reward model on preference pairs.",
    "ppo": "PPO-RLHF: actor, reference, reward model and critic.",
}


def _options_epilog(cls) -> str:
    from tether.config import describe

    lines = ["config keys (set in the YAML or as key=value overrides):"]
    for key, default, help_text in describe(cls):
        lines.append(f"  {key} (default {default})")
        lines.extend(textwrap.wrap(help_text, 76, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines)


def register_stage(sub, name: str) -> None:
    p = sub.add_parser(name, help=HELP[name], description=HELP[name], epilog=_options_epilog(_config_class(name)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help=f"YAML preset, e.g. configs/demo/{name}.yaml.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Dotted config overrides, e.g. optim.lr=1e-4.")
    p.add_argument("--print-config", action="store_true", help="Print the resolved config and exit.")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="Continue the run in DIR from its newest complete checkpoint, with its saved config.")


def _resume_config(args):
    """The saved, resolved config of the run in ``args.resume`` (no other source allowed)."""
    from pathlib import Path

    from tether.config import from_dict
    from tether.config.base import read_yaml
    from tether.errors import ConfigError

    if args.config or args.overrides:
        raise ConfigError("--resume continues a run with its saved config: drop --config and overrides.")
    path = Path(args.resume) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--resume '{args.resume}': no config.yaml there; it is not a tether run directory.")
    data = read_yaml(path)  # a hand-edited, broken config.yaml is a ConfigError, not a traceback
    stage = data.pop("stage", None)
    if stage != args.command:
        raise ConfigError(f"--resume '{args.resume}' holds a '{stage}' run, not '{args.command}'.")
    return from_dict(_config_class(args.command), data)


def run_stage(args) -> int:
    import yaml

    from tether.config import load_config, to_dict

    if args.resume:
        cfg = _resume_config(args)
    else:
        cfg = load_config(_config_class(args.command), args.config, args.overrides)
    if args.print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    if args.command == "sft":
        from tether.loops.sft import run_sft

        result = run_sft(cfg, resume=bool(args.resume))
    elif args.command == "rm":
        from tether.loops.reward_model import run_reward_model

        result = run_reward_model(cfg, resume=bool(args.resume))
    else:
        from tether.loops.ppo import run_ppo

        result = run_ppo(cfg, resume=bool(args.resume))
        result = result["history"][-1] if result["history"] else {}
    printable = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) or v is None}
    print(json.dumps(printable, indent=2))
    print(f"saved: {cfg.run.out}", file=sys.stderr)
    return 0
