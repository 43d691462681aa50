"""The `tether` command. Each subcommand lives in :mod:`tether.commands`.

A :class:`~tether.errors.TetherError` prints one paragraph and exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from tether.commands import COMMANDS
from tether.errors import TetherError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="PPO-based RLHF that runs on a laptop CPU.")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log debug messages and library output.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"tether.commands.{name}").register(sub)
    return parser


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
        return importlib.import_module(f"tether.commands.{args.command}").run(args)
    except TetherError as err:
        print(f"tether {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tether {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
