"""`tether pairs`: comparison pairs for people (or a judge) to label."""

from __future__ import annotations

from tether.common.errors import ConfigError
from tether.registry.engines import DEFAULT_ENGINE, engine_names

DESCRIPTION = (
    "Sample comparison pairs for a prompt file and write them unlabeled (pair_id, prompt, response_a, response_b, "
    "provenance) for `tether label`, or label them with an LLM judge at once (--judge-url or --judge-path, "
    "--labels). Strategies: temperature (two samples of --policy), checkpoints (--policy vs "
    "--policy-b), best_worst (the --reward-model's best and worst of --n samples of --policy)."
)


def register(sub) -> None:
    p = sub.add_parser("pairs", help="Sample comparison pairs to label.", description=DESCRIPTION)
    p.add_argument("--policy", required=True, help="Policy checkpoint (response A; both responses unless checkpoints).")
    p.add_argument("--policy-b", default=None, help="Second policy (strategy checkpoints).")
    p.add_argument("--prompts", required=True, help="Prompt file or dataset (the PPO prompt schemas).")
    p.add_argument("--out", required=True, help="Pairs file to write (JSON lines).")
    p.add_argument("--strategy", choices=("temperature", "checkpoints", "best_worst"), default="temperature")
    p.add_argument("--reward-model", default=None, help="Reward model (strategy best_worst).")
    p.add_argument("--n", type=int, default=4, help="Samples per prompt for best_worst (default 4).")
    p.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (default 1.0).")
    p.add_argument("--max-prompts", type=int, default=None, help="Use at most this many prompts.")
    p.add_argument("--max-new-tokens", type=int, default=24, help="Response length cap (default 24).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", default=DEFAULT_ENGINE, choices=engine_names(), help="Generation engine.")
    p.add_argument("--labels", default=None,
                   help="With --judge-url or --judge-path: the preference file the judge's labels go to (as "
                        "`tether label --judge-url` writes them; people may label the same pairs after it).")
    from tether.commands.judge_flags import add_judge_flags

    add_judge_flags(p)


def check(args) -> None:
    """Every argument, and that ``--out`` can be written, before any file or model is read."""
    from tether.common.outputs import check_output_file

    if args.strategy == "checkpoints" and not args.policy_b:
        raise ConfigError("--strategy checkpoints compares two policies: give --policy-b.")
    if args.strategy != "checkpoints" and args.policy_b:
        raise ConfigError(f"--policy-b is for --strategy checkpoints, not {args.strategy}.")
    if args.strategy == "best_worst" and not args.reward_model:
        raise ConfigError("--strategy best_worst ranks samples by a reward model: give --reward-model.")
    if args.strategy == "best_worst" and args.n < 2:
        raise ConfigError(f"--n must be at least 2 for best_worst (a best and a worst), got {args.n}.")
    if not 0 < args.temperature < float("inf"):
        raise ConfigError(f"--temperature must be a positive number, got {args.temperature}.")
    if args.max_new_tokens < 1 or (args.max_prompts is not None and args.max_prompts < 1):
        raise ConfigError("--max-new-tokens and --max-prompts must be at least 1.")
    check_output_file(args.out, "--out", example="pairs.jsonl")
    judged = bool(args.judge_url or args.judge_path)
    if judged != bool(args.labels):
        raise ConfigError("--labels names where the judge's labels go: give it with --judge-url or --judge-path, and "
                          "only then." if not judged else "--judge-url / --judge-path label the pairs: give --labels, "
                          "the preference file their labels go to.")
    if args.labels:
        check_output_file(args.labels, "--labels", example="labels.jsonl")


def models(args) -> list[tuple[str, str, str]]:
    """(role, flag, path) of every model that sees prompt + response: the policies, and the
    reward model that scores them (best_worst)."""
    roles = [("policy", "--policy", args.policy)]
    if args.policy_b:
        roles.append(("second policy", "--policy-b", args.policy_b))
    if args.strategy == "best_worst":
        roles.append(("reward model", "--reward-model", args.reward_model))
    return roles


def encoded_prompts(args):
    """The tokenizer, the prompt rows (at most --max-prompts) and their token ids, the lengths
    checked against the models' contexts (from their configs) before any weights load."""
    from tether.eval.context import checked_prompts, smallest_context

    return checked_prompts(args, smallest_context(models(args)), args.policy, "--policy", "sample pairs for")


def run(args) -> int:
    import json
    import sys

    from tether.data import prompt_text
    from tether.feedback.pairs import PairSpec, sample_pairs
    from tether.feedback.store import _rewrite
    from tether.rollout import check_frozen

    check(args)
    from tether.commands.judge_flags import judge_labeller

    judge = judge_labeller(args)  # the judge asked that it serves its model, before any sampling
    tokenizer, examples, ids = encoded_prompts(args)
    texts = [prompt_text(ex.prompt) for ex in examples]
    spec = PairSpec(args.strategy, args.policy, args.policy_b, args.reward_model, args.temperature, args.n,
                    args.max_new_tokens, args.seed)
    check_frozen(args.engine, (args.policy, args.policy_b))  # what would stop the engine, before any weights load
    rows, counts = sample_pairs(spec, texts, ids, tokenizer, args.engine)
    from pathlib import Path

    _rewrite(Path(args.out), rows)
    if judge is not None:
        from tether.feedback.judge_labels import label_with_judge
        from tether.feedback.store import LabelStore, load_pairs

        client, rubric = judge
        try:
            counts["judge"] = label_with_judge(client, LabelStore(load_pairs(args.out), Path(args.labels)), rubric,
                                               say=lambda text: print(text, file=sys.stderr))
        finally:
            client.close()
    print(json.dumps(counts))
    print(f"written: {args.out}" + (f", labels: {args.labels}" if judge is not None else ""), file=sys.stderr)
    return 0
