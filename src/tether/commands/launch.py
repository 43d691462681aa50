"""`tether launch [torchrun options] STAGE ARGS...`: a data-parallel run, started as torchrun
starts it, that checks its input once and fails as any tether command does.

``torchrun ... -m tether.cli STAGE`` works too, but every rank checks the same config and data,
and a refused input ends in torchrun's own failure report (a Python traceback and one block per
rank). ``tether launch`` resolves the config and runs the stage's dry-run checks (config, run
directory, tokenizer, models' configs, data; no weights) in this one process first: bad input is
one paragraph and exit 2 before any rank starts. Then torchrun's own launcher
(``torch.distributed.run``) starts the ranks with the same arguments; a rank that fails with
tether's error has already printed it, so this process only adds which rank ended how for other
exits, and returns the first failed rank's exit status (128 + N for a rank killed by signal N, as a
shell reports it), without a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from tether.common.errors import ConfigError

DESCRIPTION = ("Start a data-parallel stage on several processes (torchrun's launcher), checking the config and "
               "data once first. Example: tether launch --standalone --nproc-per-node 2 sft --config "
               "configs/demo/sft.yaml run.threads=1")


def register(sub) -> None:
    p = sub.add_parser("launch", help="Run a stage on several processes (torchrun), input checked once.",
                       description=DESCRIPTION)
    p.add_argument("argv", nargs=argparse.REMAINDER, metavar="[TORCHRUN OPTIONS] STAGE ARGS",
                   help="torchrun's options (--nproc-per-node, --nnodes, --standalone, --rdzv-endpoint, ...), then "
                        "the stage (sft, rm, dpo or an RL algorithm's) and its arguments.")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(torchrun's options, the stage's command line): the stage starts at the first stage name."""
    from tether.registry.stages import stages

    names = stages()
    for i, token in enumerate(argv):
        if token in names:
            return argv[:i], argv[i:]
    raise ConfigError(f"tether launch needs a stage after torchrun's options: one of {', '.join(names)} (got "
                      f"{' '.join(argv) or 'nothing'}). Example: tether launch --nproc-per-node 2 sft --config "
                      "configs/demo/sft.yaml")


def check_once(stage_argv: list[str]) -> bool:
    """The stage's config and dry-run checks, in this process; False when there is nothing to run
    (a --resume of a finished run, --print-config, --dry-run: done here, once)."""
    from tether.cli import build_parser
    from tether.commands.stage import already_complete, resolve_config, run_stage
    from tether.plan import dry_run

    args = build_parser().parse_args(stage_argv)
    if args.print_config or args.dry_run:
        run_stage(args)
        return False
    cfg = resolve_config(args)
    if args.resume and already_complete(args):
        return False
    dry_run(args.command, cfg, resume=bool(args.resume))
    return True


#: ``--nproc-per-node`` values torchrun counts itself (the machine's GPUs, CPUs, ...).
NAMED_NPROC = ("auto", "cpu", "gpu", "xpu")


def check_torchrun_args(launch_args) -> None:
    """torchrun's process counts, refused here in one paragraph and before the input checks:
    torchrun itself answers a bad one with a traceback."""
    from torch.distributed.run import determine_local_world_size, parse_min_max_nnodes

    value = str(launch_args.nproc_per_node).strip()
    try:
        count = int(value)
    except ValueError:
        if value not in NAMED_NPROC:
            raise ConfigError(f"--nproc-per-node {value}: expected a whole number of processes per "
                              f"machine, at least 1, or one of {', '.join(NAMED_NPROC)}.") from None
        try:
            count = determine_local_world_size(value)
        except ValueError as err:  # gpu/xpu on a machine without one
            raise ConfigError(f"--nproc-per-node {value}: {err} Give a number of processes "
                              "instead, e.g. --nproc-per-node 2.") from None
    if count < 1:
        raise ConfigError(f"--nproc-per-node {value}: expected a whole number of processes per machine, "
                          f"at least 1, or one of {', '.join(NAMED_NPROC)}.")
    try:
        low, high = parse_min_max_nnodes(str(launch_args.nnodes))
    except ValueError:
        low = high = 0
    if not 0 < low <= high:
        raise ConfigError(f"--nnodes {launch_args.nnodes}: expected a number of machines, at least 1, "
                          "or a range MIN:MAX with 1 <= MIN <= MAX.")


def exit_status(exitcode: int) -> int:
    """This process's exit code for a rank that ended with ``exitcode`` (negative: killed by that
    signal, reported as a shell does, 128 + N)."""
    if exitcode < 0:
        return 128 + (-exitcode)
    return exitcode if 0 < exitcode < 256 else 1


def report_failure(err) -> int:
    """Say which rank of a torchrun ``ChildFailedError`` ended first and how (unless it already said
    so itself: exit 2 is tether's own one-paragraph error); that rank's exit status.

    Only what torchrun's ``ProcessFailure`` holds is used: the local rank, pid, exit code and a
    signal's name. It holds no host name: the rank is one this launcher started, on this machine."""
    rank, failure = err.get_first_failure()
    code = failure.exitcode
    if code != 2:
        if code < 0:
            name = failure.signal_name()
            how = f"was killed by signal {-code}" + (f" ({name})" if name and name != "<N/A>" else "")
        else:
            how = f"exited with code {code}"
        # Not the other failures torchrun lists: they are mostly the ranks it stopped because of this one.
        print(f"tether launch: rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {how}; the "
              "other ranks were stopped. A run with a complete checkpoint continues with the same command and "
              f"--resume RUN_DIR. Exit status {exit_status(code)}.", file=sys.stderr)
    return exit_status(code)


def run(args) -> int:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run as torchrun

    torch_argv, stage_argv = split_argv(list(args.argv))
    launch_args = parse_args([*torch_argv, "-m", "tether.cli", *stage_argv])
    check_torchrun_args(launch_args)
    if not check_once(stage_argv):
        return 0
    # torchrun logs every failed rank with its own line; tether reports the failure once, below.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        torchrun(launch_args)
    except ChildFailedError as err:
        return report_failure(err)
    return 0
