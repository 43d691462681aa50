"""One module per `tether` subcommand, each with ``register(subparsers)`` and ``run(args) -> int``;
the training stages (:mod:`tether.registry.stages`: sft, rm, dpo and one per registered RL algorithm)
share :mod:`tether.commands.stage`.

``cli.py`` imports them lazily by name, so ``tether --help`` stays fast and a command's heavy
imports (torch, transformers, fastapi) load only when it runs.
"""

from __future__ import annotations

import importlib

#: The commands that are not training stages, in the order ``tether --help`` lists them (after demo and the stages).
TOOLS = ["eval", "compare", "pairs", "label", "iterate", "sweep", "report", "serve", "bench", "launch", "warm"]


def command_names() -> list[str]:
    """Every command: demo, the stages (plugins' algorithms included), then the tools."""
    from tether.registry.stages import stages

    return ["demo", *stages(), *TOOLS]


def register(sub, name: str) -> None:
    """Add command ``name``'s parser to ``sub``."""
    from tether.registry.stages import stages

    if name in stages():
        importlib.import_module("tether.commands.stage").register(sub, name)
    else:
        importlib.import_module(f"tether.commands.{name}").register(sub)


def run(args) -> int:
    """Run the parsed command."""
    from tether.registry.stages import stages

    module = "stage" if args.command in stages() else args.command
    return importlib.import_module(f"tether.commands.{module}").run(args)
