"""`tether sweep`: the β frontier on a finished demo directory."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser(
        "sweep", help="PPO at several fixed beta from a demo's SFT and RM; plot reward vs sqrt(KL).",
        description="Run PPO at several fixed KL coefficients from DIR/sft and DIR/rm (made by "
        "`tether demo --out DIR`), evaluate each on the held-out prompts as it trains, and write "
        "DIR/frontier.json and DIR/frontier.png: proxy and gold score against sqrt(KL), with best-of-N.",
    )
    p.add_argument("--demo", default="runs/demo", help="The demo directory DIR (default runs/demo).")
    p.add_argument("--betas", default="0,0.02,0.05,0.1,0.2,0.5", help="Comma-separated beta values.")
    p.add_argument("--iterations", type=int, default=None, help="PPO iterations per run (default: the preset's).")
    p.add_argument("--eval-every", type=int, default=10, help="Held-out evaluation every N iterations (default 10).")
    p.add_argument("--seed", type=int, default=0, help="Seed (default 0).")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="Extra PPO config overrides for every run.")


def run(args) -> int:
    from tether.common.errors import ConfigError
    from tether.common.outputs import check_output_dir
    from tether.plots.report import build_report
    from tether.demo.sweep import format_frontier, run_sweep

    try:
        betas = [float(b) for b in args.betas.split(",") if b.strip()]
    except ValueError:
        raise ConfigError(f"--betas '{args.betas}': expected comma-separated numbers, e.g. 0,0.05,0.2.") from None
    # The runs, frontier.json and frontier.png go into the demo directory.
    check_output_dir(args.demo, "--demo", hint="give a demo directory this user can write in")
    frontier = run_sweep(args.demo, betas, args.iterations, args.eval_every, args.seed, args.overrides)
    print(format_frontier(frontier))
    build_report(args.demo)
    print(f"\nfrontier: {args.demo}/frontier.png")
    return 0
