"""`tether iterate`: rounds of policy → pairs → labels → reward model → PPO (docs/human_feedback.md)."""

from __future__ import annotations

from tether.registry.algorithms import DEFAULT_ALGORITHM
from tether.common.errors import ConfigError

DESCRIPTION = (
    "Run the InstructGPT loop in rounds on the demo task: sample pairs from the current policy, label them (a "
    "callable judge, by default the task's biased annotators; an LLM judge with --judge-url or --judge-path; or "
    "people on the labelling page with --page, after the LLM judge when both are given), "
    "retrain the reward model on every label so far, run PPO from SFT with it. Writes DIR/iterate.json and a "
    "per-round table: reward-model accuracy and spurious bias, PPO proxy and gold."
)


def register(sub) -> None:
    p = sub.add_parser("iterate", help="Rounds of pairs -> labels -> reward model -> PPO.", description=DESCRIPTION)
    p.add_argument("--demo", action="store_true", required=True, help="On the demo task (the only task today).")
    p.add_argument("--from", dest="source", required=True, metavar="DEMO_DIR",
                   help="A `tether demo` directory: its task, SFT model and reward model (round 0).")
    p.add_argument("--out", default="runs/iterate", help="Directory DIR for the rounds (default runs/iterate).")
    p.add_argument("--rounds", type=int, default=3, help="Rounds (default 3).")
    p.add_argument("--pairs-per-round", type=int, default=2000, help="Pairs sampled and labelled per round (default 2000).")
    p.add_argument("--labeller", default="tether.tasks.arith.judge:biased_annotator",
                   help="A python `module:function(prompt, response_a, response_b) -> 'a'|'b'|'tie'` (default: the "
                        "demo task's biased annotators).")
    p.add_argument("--page", action="store_true", help="People label each round on the page (`tether label`) instead.")
    p.add_argument("--port", type=int, default=8800, help="With --page: its port on 127.0.0.1.")
    p.add_argument("--seed", type=int, default=0)
    from tether.commands.judge_flags import add_judge_flags

    add_judge_flags(p)  # the judge labels each round (with --page, people label the same pairs after it)
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="STAGE:KEY=VALUE",
                   help="Override the rm or ppo preset's key, e.g. --set ppo:rl.iterations=50.")


def run(args) -> int:
    from pathlib import Path

    from tether.commands.demo import parse_sets
    from tether.feedback.iterate import format_rounds, iterate_demo
    from tether.common.outputs import check_output_dir

    if args.rounds < 1 or args.pairs_per_round < 1:
        raise ConfigError("--rounds and --pairs-per-round must be at least 1.")
    source = Path(args.source)
    if not all((source / part).is_dir() for part in ("task", "sft", "rm")):
        raise ConfigError(f"--from '{args.source}': expected a `tether demo` directory holding task/, sft/ and rm/.")
    check_output_dir(args.out, "--out")
    from tether.commands.judge_flags import judge_labeller

    labeller, serve_page, judge = None, None, judge_labeller(args)
    if args.page:
        serve_page = _page_server(args.port)
    elif judge is None:
        from tether.common.targets import import_callable

        labeller = import_callable(args.labeller, "--labeller")
    try:
        result = iterate_demo(Path(args.out), source, args.rounds, args.pairs_per_round, labeller, args.seed,
                              parse_sets(args.sets, ("rm", DEFAULT_ALGORITHM)), serve_page=serve_page, judge=judge)
    finally:
        if judge is not None:
            judge[0].close()
    print(format_rounds(result["rounds"]))
    return 0


def _page_server(port: int, on_url=None):
    """``start(store) -> stop()``: the labelling page on 127.0.0.1 in a thread, for one round;
    ``on_url(url)`` is told where (default: printed)."""

    def start(store):
        from tether.feedback.app import create_label_app
        from tether.serve import ServerThread

        server = ServerThread(create_label_app(store), port=port)
        server.__enter__()
        (on_url or (lambda url: print(f"label this round's pairs at {url}", flush=True)))(f"{server.url}/")
        return lambda: server.__exit__(None, None, None)

    return start
