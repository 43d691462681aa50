"""`tether STAGE` for every stage of :mod:`tether.registry.stages` (sft, rm, dpo and one per registered RL
algorithm): run it from a YAML preset and dotted overrides."""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap


def _config_class(name: str):
    from tether.registry.stages import stage_spec

    return stage_spec(name).config_class()


def _options_epilog(cls) -> str:
    from tether.config import describe

    lines = ["config keys (set in the YAML or as key=value overrides):"]
    for key, default, help_text in describe(cls):
        lines.append(f"  {key} (default {default})")
        lines.extend(textwrap.wrap(help_text, 76, initial_indent="      ", subsequent_indent="      "))
    return "\n".join(lines)


def register_stage(sub, name: str) -> None:
    from tether.registry.stages import stage_spec

    summary = stage_spec(name).summary
    p = sub.add_parser(name, help=summary, description=summary, epilog=_options_epilog(_config_class(name)),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=None, help=f"YAML preset, e.g. configs/demo/{name}.yaml.")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Dotted config overrides, e.g. optim.lr=1e-4.")
    p.add_argument("--print-config", action="store_true", help="Print the resolved config and exit.")
    p.add_argument("--dry-run", action="store_true",
                   help="Check the config, the run directory, the tokenizer, the models' configs and the data as the "
                        "run would (no weights loaded), print the plan (roles, devices, placement, batches, steps, "
                        "memory per role) and exit without writing anything.")
    p.add_argument("--resume", metavar="DIR", default=None,
                   help="Continue the run in DIR from its newest complete checkpoint, with its saved config.")


def _resume_config(args):
    """The saved, resolved config of the run in ``args.resume``, continuing in that directory.

    ``run.out`` becomes the directory given (wherever the command runs, and for a copied run
    directory the copy), and relative input paths are resolved against the directory the run
    was started from, so the run reads the same inputs as before.
    """
    from pathlib import Path

    from tether.config import from_dict
    from tether.config.saved import read_preset
    from tether.common.errors import ConfigError

    if args.config or args.overrides:
        raise ConfigError("--resume continues a run with its saved config: drop --config and overrides.")
    path = Path(args.resume) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"--resume '{args.resume}': no config.yaml there; it is not a tether run directory.")
    cls = _config_class(args.command)
    # A hand-edited, broken config.yaml is a ConfigError, not a traceback; relative inputs are
    # read from the directory the run was started from.
    data, stage = read_preset(cls, path)
    if stage != args.command:
        raise ConfigError(f"--resume '{args.resume}' holds a '{stage}' run, not '{args.command}'.")
    run = data.get("run")
    data["run"] = {**(run if isinstance(run, dict) else {}), "out": str(Path(args.resume))}
    return from_dict(cls, data)


def already_complete(args) -> bool:
    """``--resume DIR`` of a run that already finished: say so (nothing to do)."""
    from pathlib import Path

    from tether.runs import MANIFEST

    manifest = Path(args.resume) / MANIFEST
    if not manifest.is_file():
        return False
    try:
        meta = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    done = meta.get("steps", meta.get("iterations"))
    at = f" (it ended at step {done})" if isinstance(done, int) else ""
    if os.environ.get("RANK", "0") == "0":
        print(f"tether {args.command}: the run in '{args.resume}' is already complete{at}; nothing to resume.",
              file=sys.stderr)
    return True


def _check_algorithm(args) -> None:
    """``tether X`` runs algorithm X: an ``algorithm`` override or preset key naming another is an error."""
    from tether.api import given_algorithms
    from tether.common.errors import ConfigError

    for name in given_algorithms(args.config, args.overrides):
        if name != args.command:
            raise ConfigError(f"Config key 'algorithm' = {name!r} under `tether {args.command}`: each RL algorithm has "
                              f"its command; run `tether {name}` (or drop the key).")


def resolve_config(args):
    """The stage's config from its command line: the saved one of ``--resume DIR``, or the preset
    with the overrides (an RL command's own algorithm included)."""
    from tether.config import load_config

    if args.resume:
        return _resume_config(args)
    from tether.registry.stages import stage_spec

    overrides = args.overrides
    if stage_spec(args.command).algorithm:  # the command names the algorithm (a preset's own must agree)
        overrides = [*overrides, f"algorithm={args.command}"]
        _check_algorithm(args)
    return load_config(_config_class(args.command), args.config, overrides)


def register(sub, name: str) -> None:
    """The command ``tether NAME`` of stage ``name``."""
    register_stage(sub, name)


def run(args) -> int:
    return run_stage(args)


def run_stage(args) -> int:
    import yaml

    from tether.config import to_dict

    cfg = resolve_config(args)
    if args.resume and not (args.print_config or args.dry_run) and already_complete(args):
        return 0
    if args.print_config:
        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    if args.dry_run:
        from tether.plan import dry_run

        plan = dry_run(args.command, cfg, resume=bool(args.resume))
        if os.environ.get("RANK", "0") == "0":  # under torchrun, one plan
            print(plan.render())
        return 0
    from tether.registry.stages import stage_spec

    spec = stage_spec(args.command)
    result = spec.run_function()(cfg, resume=bool(args.resume))
    if spec.algorithm:  # an RL run reports its last iteration
        result = result["history"][-1] if result["history"] else {}
    if os.environ.get("RANK", "0") != "0":  # torchrun: rank 0 reports for the run
        return 0
    printable = {k: v for k, v in result.items() if isinstance(v, (int, float, str)) or v is None}
    print(json.dumps(printable, indent=2))
    print(f"saved: {cfg.run.out}", file=sys.stderr)
    return 0
