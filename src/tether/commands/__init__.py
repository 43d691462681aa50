"""One module per `tether` subcommand, each with ``register(subparsers)`` and ``run(args) -> int``.

``cli.py`` imports them lazily by name, so ``tether --help`` stays fast and a command's heavy
imports (torch, transformers, fastapi) load only when it runs.
"""

COMMANDS = ["demo", "sft", "rm", "dpo", "ppo", "grpo", "rloo", "reinforce_pp", "eval", "compare", "pairs", "label", "iterate", "sweep", "report", "serve", "bench", "launch"]
