"""`tether compare`: every alignment method on one task, from the same SFT and reward model."""

from __future__ import annotations

from pathlib import Path

from tether.common.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="The RL algorithms and the preference methods (DPO, SimPO, ORPO, KTO) side by side on the demo task, with "
             "best-of-N.",
        description="Run each method from the demo presets (configs/demo/METHOD.yaml) from the same SFT model and "
        "reward model, with the same budget of generated tokens; score every final policy (and each run's "
        "held-out evaluations along the way) with the gold judge, the reward model and the KL to SFT, beside "
        "best-of-N of SFT. Writes DIR/compare.json, DIR/compare.md (the table) and DIR/compare.png (the chart). "
        "With --seeds N the whole comparison runs N times (DIR/seed<S>/, each complete) and DIR holds the "
        "aggregate: mean ± sd and the 95% interval of every number over the seeds.",
    )
    task = p.add_mutually_exclusive_group(required=True)
    task.add_argument("--demo", action="store_true",
                      help="Compare on the demo task: the RL algorithms and the preference methods.")
    task.add_argument("--tool-demo", action="store_true",
                      help="Compare on the tool demo (docs/episodes.md): each RL algorithm with a "
                           "configs/demo/<method>_tools.yaml preset trained in episodes calling the calculator, from "
                           "SFT on tool demonstrations, against `notool` (SFT on direct answers, then GRPO "
                           "single-turn); every policy measured on the held-out facts. --seeds defaults to 1 here "
                           "too; --from and --jobs do not apply. --set may also name sft_tools, sft_notool and "
                           "task (the calc task builder's sizes, e.g. task:n_sft=200).")
    task.add_argument("--pareto", action="store_true",
                      help="One RL method (--methods, default ppo) from its configs/demo/<method>_objectives.yaml "
                           "preset at each setting of --vary, over --seeds (default 3 here), and the front of gold "
                           "against each objective (the reward model's score, the '!' rate): DIR/pareto.json, .md "
                           "and .png (docs/judges.md).")
    p.add_argument("--vary", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="With --pareto: a config key and its value at each setting (YAML values, null included); "
                        "several --vary lists are zipped, e.g. --vary 'reward.terms[1].limit=null,0.35,0.25' --vary "
                        "'reward.terms[1].weight=0,1,1' (repeatable).")
    p.add_argument("--out", default="runs/compare", help="Directory DIR for the runs and results (default runs/compare).")
    p.add_argument("--from", dest="source", default=None, metavar="DEMO_DIR",
                   help="Reuse the task, SFT and reward model of a `tether demo` run (default: build them in DIR/demo).")
    p.add_argument("--methods", default=None,
                   help="Comma-separated methods to run: registered RL algorithms, dpo, simpo, orpo and kto (default: "
                        "all of them).")
    p.add_argument("--seed", type=int, default=0,
                   help="Seed of every run and of the evaluation; with --seeds N the first of N (default 0).")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="METHOD:KEY=VALUE",
                   help="Override a method's config key, e.g. --set grpo:group.size=8 (repeatable).")
    p.add_argument("--eval-repeats", type=int, default=4,
                   help="Samples per held-out prompt for every measured policy (default 4: 512 responses).")
    p.add_argument("--seeds", type=int, default=None, metavar="N",
                   help="Run the whole comparison N times, with run seeds --seed, --seed+1, ..., each in DIR/seed<S>/ "
                        "from the same SFT and reward model; DIR/compare.json, .md and .png then hold mean ± sd and "
                        "the 95%% interval over the seeds (default 1: one comparison, in DIR; 3 with --pareto).")
    p.add_argument("--jobs", type=int, default=1, metavar="J",
                   help="Run up to J methods' child processes at once (each demo preset trains on one thread); the "
                        "measurements follow the runs (default 1).")


def run(args) -> int:
    if args.seeds is None:
        args.seeds = 3 if args.pareto else 1
    if args.tool_demo:
        return run_tool_demo(args)
    if args.pareto:
        return run_pareto(args)
    if args.vary:
        raise ConfigError("--vary applies to --pareto only.")
    from tether.commands.demo import parse_sets
    from tether.demo.compare import compare_demo
    from tether.demo.compare import methods as known
    from tether.plots.compare import compare_table

    choices = known()
    methods = [m.strip() for m in (args.methods or ",".join(choices)).split(",") if m.strip()]
    unknown = [m for m in methods if m not in choices]
    if not methods or unknown:
        raise ConfigError(f"--methods {args.methods!r}: expected a comma-separated list of {', '.join(choices)}.")
    if args.eval_repeats < 1:
        raise ConfigError(f"--eval-repeats must be at least 1, got {args.eval_repeats}.")
    source = checked_source(args, (("--seeds", args.seeds), ("--jobs", args.jobs)))
    data = compare_demo(Path(args.out), source, methods, args.seed, parse_sets(args.sets, choices, "METHOD"),
                        args.eval_repeats, seeds=args.seeds, jobs=args.jobs)
    if args.seeds > 1:
        from tether.plots.compare_seeds import compare_seeds_table

        print(compare_seeds_table(data))
        print(f"\nwritten: {args.out}/compare.json, compare.md, compare.png (over the seeds); "
              f"{args.out}/seed<S>/ for each seed")
    else:
        print(compare_table(data))
        print(f"\nwritten: {args.out}/compare.json, compare.md, compare.png")
    return 0


def run_tool_demo(args) -> int:
    """`tether compare --tool-demo` (:mod:`tether.demo.tool_compare`)."""
    from tether.commands.demo import parse_sets
    from tether.common.outputs import check_output_dir
    from tether.demo.tool_compare import EXTRA_NAMES, compare_tool_demo, methods
    from tether.plots.tool_compare import tool_compare_table

    choices = methods()
    chosen = [m.strip() for m in (args.methods or ",".join(choices)).split(",") if m.strip()]
    unknown = [m for m in chosen if m not in choices]
    if not chosen or unknown:
        raise ConfigError(f"--methods {args.methods!r} with --tool-demo: expected a comma-separated list of "
                          f"{', '.join(choices)} (the RL algorithms with a configs/demo/<method>_tools.yaml preset, "
                          "and the notool baseline).")
    for flag, value, default in (("--from", args.source, None), ("--jobs", args.jobs, 1)):
        if value != default:
            raise ConfigError(f"{flag} does not apply to --tool-demo: its stages run one after the other in this "
                              "process, from a task built per seed.")
    for flag, value in (("--eval-repeats", args.eval_repeats), ("--seeds", args.seeds)):
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}.")
    sets = parse_sets(args.sets, (*choices, *EXTRA_NAMES), "METHOD")
    check_output_dir(args.out, "--out")
    data = compare_tool_demo(Path(args.out), chosen, args.seed, args.seeds, sets, args.eval_repeats)
    print(tool_compare_table(data))
    print(f"\nwritten: {args.out}/compare.json, compare.md, compare.png; {args.out}/seed<S>/ for each seed")
    return 0


def run_pareto(args) -> int:
    """`tether compare --pareto` (:mod:`tether.demo.pareto`)."""
    from tether.commands.demo import parse_sets
    from tether.demo.compare import prepare_demo, rl_methods
    from tether.demo.pareto import pareto_demo, parse_vary
    from tether.registry.algorithms import DEFAULT_ALGORITHM
    from tether.plots.pareto import pareto_table

    method = (args.methods or DEFAULT_ALGORITHM).strip()
    if method not in rl_methods():
        raise ConfigError(f"--methods {args.methods!r} with --pareto: expected one RL algorithm of "
                          f"{', '.join(rl_methods())}.")
    extra = parse_sets(args.sets, (method,), "METHOD").get(method, [])  # every setting's runs
    settings = parse_vary(args.vary)
    source = checked_source(args, (("--eval-repeats", args.eval_repeats), ("--jobs", args.jobs),
                                   ("--seeds", args.seeds)))
    out = Path(args.out)
    demo = source if source is not None else prepare_demo(out / "demo", args.seed, print)
    data = pareto_demo(out, demo, method, settings, args.seed, args.seeds, args.jobs, args.eval_repeats, extra)
    print(pareto_table(data))
    print(f"\nwritten: {args.out}/pareto.json, pareto.md, pareto.png; {args.out}/seed<S>/ for each seed")
    return 0


def checked_source(args, counts) -> Path | None:
    """``--from``'s demo directory (None: build one), each of ``counts`` ((flag, value)) at least 1,
    and ``--out`` writable: checked before anything runs."""
    from tether.common.outputs import check_output_dir

    for flag, value in counts:
        if value < 1:
            raise ConfigError(f"{flag} must be at least 1, got {value}.")
    source = Path(args.source) if args.source else None
    if source is not None and not all((source / part).is_dir() for part in ("task", "sft", "rm")):
        raise ConfigError(f"--from '{args.source}': expected a `tether demo` directory holding task/, sft/ and rm/.")
    check_output_dir(args.out, "--out")
    return source
