"""The `tether` command. Each subcommand lives in :mod:`tether.commands`.

A :class:`~tether.common.errors.TetherError` prints one paragraph and exits with code 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import tether.commands as commands
from tether.common.errors import ConfigError, DataError, ModelError, TetherError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tether", description="PPO-based RLHF that runs on a laptop CPU.")
    parser.add_argument("-v", "--verbose", action="store_true", help="Log debug messages and library output.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands.command_names():
        commands.register(sub, name)
    return parser


def quiet_libraries(verbose: bool) -> None:
    """transformers' per-load progress bars and init notes drown tether's own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if not verbose:
        hf_logging.set_verbosity_error()


def parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line; ``launch`` passes everything after it through (torchrun's options first,
    which argparse would otherwise take for tether's own)."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    head = argv[: argv.index("launch")] if "launch" in argv else None
    if head is not None and all(a in ("-v", "--verbose") for a in head):
        rest = argv[len(head) + 1:]
        if rest and rest[0] in ("-h", "--help"):
            parser.parse_args([*head, "launch", "--help"])
        return argparse.Namespace(command="launch", verbose=bool(head), argv=rest)
    return parser.parse_args(argv)


#: Seconds a rank that does not report a shared error waits before exiting (see :func:`_say`).
SILENT_RANK_GRACE_S = 20.0


def _reports(err: TetherError) -> bool:
    """Under torchrun every rank meets the same bad input (config, data, model): one process per
    machine (local rank 0) says so, not each rank. What happens to one rank (a peer lost, a
    non-finite loss) is said by the rank it happened to."""
    same_on_every_rank = isinstance(err, (ConfigError, DataError, ModelError))
    return not same_on_every_rank or os.environ.get("LOCAL_RANK", "0") == "0"


def _say(err: TetherError, command: str | None) -> int:
    """Print ``err`` as tether's one-paragraph error (once under torchrun: see :func:`_reports`); exit code 2."""
    if _reports(err):
        rank = os.environ.get("RANK", "0")
        where = f" (rank {rank})" if rank != "0" else ""
        prog = f"tether {command}" if command else "tether"
        print(f"{prog}{where}: error: {err}", file=sys.stderr)
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # A silent rank that exits first makes torchrun stop every rank, the one that reports too,
        # perhaps before it printed: the silent ones wait for it (it exits, and torchrun ends them).
        time.sleep(SILENT_RANK_GRACE_S)
    return 2


def main(argv: list[str] | None = None) -> int:
    try:
        # Building the parser lists the commands, which loads the plugins (a plugin algorithm is a
        # command): a broken plugin is reported here like any bad input, --help included.
        args = parse(argv)
    except TetherError as err:
        return _say(err, None)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    quiet_libraries(args.verbose)
    try:
        return commands.run(args)
    except TetherError as err:
        return _say(err, args.command)
    except KeyboardInterrupt:
        print(f"tether {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
