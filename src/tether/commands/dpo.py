"""`tether dpo`: see :mod:`tether.commands.stage`."""

from tether.commands.stage import register_stage, run_stage


def register(sub) -> None:
    register_stage(sub, "dpo")


def run(args) -> int:
    return run_stage(args)
