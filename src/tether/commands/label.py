"""`tether label`: the labelling page over a pairs file, or (--stats) agreement and the majority vote."""

from __future__ import annotations

from tether.common.errors import ConfigError

DESCRIPTION = (
    "Serve a page on which people compare the two responses of each pair from `tether pairs` by keyboard (1 / 2, "
    "= for a tie, s to skip, u to undo). Verdicts are appended to OUT in the schema `tether rm` reads (ties in "
    "OUT.ties.jsonl), synced per label; a restarted server resumes where each annotator stopped. With --stats: "
    "Cohen's / Fleiss' kappa, each annotator's agreement with the majority, and --export of the majority vote. "
    "With --judge-url or --judge-path an LLM judge labels every pair instead (both orders asked), as the annotator "
    "judge:<model>; --stats then reports its kappa with each person and their majority, and its self-consistency. "
    "See docs/human_feedback.md and docs/judges.md."
)


def register(sub) -> None:
    p = sub.add_parser("label", help="Label comparison pairs in the browser; agreement statistics.",
                       description=DESCRIPTION)
    p.add_argument("--pairs", required=True, help="Pairs file written by `tether pairs`.")
    p.add_argument("--out", required=True, help="Preference file the labels go to (read by `tether rm`).")
    p.add_argument("--guidelines", default=None, help="A text file of annotation guidelines shown above each pair.")
    p.add_argument("--overlap", type=int, default=1, help="Annotators per pair (default 1).")
    p.add_argument("--host", default="127.0.0.1", help="Interface to bind (default 127.0.0.1: this machine only).")
    p.add_argument("--port", type=int, default=8800, help="TCP port; 0 picks a free one (default 8800).")
    p.add_argument("--token", default=None,
                   help="Require this access token (open the page as /?token=TOKEN); default: the TETHER_LABEL_TOKEN "
                        "variable, if set.")
    p.add_argument("--stats", action="store_true", help="Print agreement statistics of OUT instead of serving.")
    p.add_argument("--export", default=None, help="With --stats: write the majority-vote preference file here.")
    p.add_argument("--gold", default=None, metavar="MODULE:FUNCTION",
                   help="With --stats: a trusted scorer f(prompt, response) -> float (on the demo, "
                        "tether.tasks.arith.judge:gold_score); each annotator's and judge's agreement with it is "
                        "reported over the pairs it does not tie.")
    from tether.commands.judge_flags import add_judge_flags

    add_judge_flags(p)  # the judge labels every pair it has not labelled, then the command ends


def run(args) -> int:
    import os
    from pathlib import Path

    from tether.feedback.store import LabelStore, load_pairs

    if args.overlap < 1:
        raise ConfigError(f"--overlap must be at least 1 (annotators per pair), got {args.overlap}.")
    if args.stats and (args.judge_url or args.judge_path):
        raise ConfigError("--stats reads the labels already in --out; label with the judge first (the same command "
                          "without --stats), then ask for the statistics.")
    if args.export and not args.stats:
        raise ConfigError("--export writes the majority vote of --stats: add --stats.")
    if args.gold and not args.stats:
        raise ConfigError("--gold compares the labels with a trusted scorer in --stats: add --stats.")
    check_outputs(args)
    store = LabelStore(load_pairs(args.pairs), Path(args.out), args.overlap)
    from tether.commands.judge_flags import judge_labeller

    judge = None if args.stats else judge_labeller(args)
    if judge is not None:
        from tether.feedback.judge_labels import label_with_judge

        client, rubric = judge
        try:
            counts = label_with_judge(client, store, rubric)
        finally:
            client.close()
        print(f"tether label: the judge labelled {counts['a'] + counts['b'] + counts['tie']} pairs into {args.out} "
              f"(A {counts['a']}, B {counts['b']}, tie {counts['tie']}, of which {counts['position_bias']} for "
              f"position bias; {counts['failed']} without a verdict); `tether label --stats` compares it with people")
        return 0
    if args.stats:
        import json

        from tether.feedback.stats import export_majority, format_stats, label_stats

        gold = None
        if args.gold:
            from tether.common.targets import import_callable
            from tether.feedback.stats import gold_margins

            gold = gold_margins(store, import_callable(args.gold, "--gold"), "--gold")
        stats = label_stats(store, gold)
        if args.export:
            stats["export"] = {"path": args.export, **export_majority(store, args.export)}
        print(format_stats(stats))
        print(json.dumps(stats, indent=2))
        return 0
    guidelines = ""
    if args.guidelines:
        path = Path(args.guidelines)
        if not path.is_file():
            raise ConfigError(f"--guidelines '{path}' does not exist; expected a text file.")
        guidelines = path.read_text(encoding="utf-8")
    token = args.token if args.token is not None else os.environ.get("TETHER_LABEL_TOKEN") or None
    if token is not None and not token.strip():
        raise ConfigError("--token is empty; give a token, or omit it to serve without one.")
    from tether.feedback.app import create_label_app
    from tether.serve.server import bind_socket, serve

    sock = bind_socket(args.host, args.port)
    try:
        port = sock.getsockname()[1]
        query = "?token=..." if token else ""
        print(f"tether label: {len(store.pairs)} pairs, labels to {args.out}; open http://{args.host}:{port}/{query}",
              flush=True)
        serve(create_label_app(store, guidelines, token), args.host, port, access_log=False, sock=sock)
    finally:
        sock.close()
    return 0


def check_outputs(args) -> None:
    """Where labels will go, before the page serves a pair: --out (and its .ties/.skips files
    beside it) when serving, --export with --stats (--out is only read then)."""
    from tether.common.outputs import check_output_file

    if args.stats:
        if args.export:
            check_output_file(args.export, "--export", example="majority.jsonl")
        return
    check_output_file(args.out, "--out", example="labels.jsonl")
