"""The ``--judge-*`` flags of `tether label` and `tether iterate`: an LLM judge as a labeller (RLAIF,
docs/judges.md), reached over an OpenAI-compatible endpoint or loaded in this process."""

from __future__ import annotations

from tether.common.errors import ConfigError


def add_judge_flags(p) -> None:
    p.add_argument("--judge-url", default=None,
                   help="Label with an LLM judge at this OpenAI-compatible server (`tether serve`, vLLM's OpenAI "
                        "server, a hosted provider): each pair asked in both orders with the pairwise rubric.")
    p.add_argument("--judge-model", default=None, help="With --judge-url: the model name the server serves.")
    p.add_argument("--judge-path", default=None,
                   help="Instead of --judge-url: a judge checkpoint (causal LM with its chat template) loaded here.")
    p.add_argument("--judge-rubric", default=None,
                   help="A rubric file with {prompt}, {response_a} and {response_b} (default: the built-in "
                        "pairwise rubric; the answer must end 'Winner: A', 'Winner: B' or 'Winner: tie').")
    p.add_argument("--judge-max-tokens", type=int, default=256, help="Tokens the judge may write per answer.")


def judge_labeller(args):
    """(client, rubric) from the flags, or None when no judge is named; the server asked once that
    it serves the model. A ConfigError naming the flag for a bad combination."""
    if not (args.judge_url or args.judge_path):
        for flag in ("judge_model", "judge_rubric"):
            if getattr(args, flag):
                raise ConfigError(f"--{flag.replace('_', '-')} is set without --judge-url or --judge-path, so it "
                                  "would have no effect.")
        return None
    if args.judge_url and args.judge_path:
        raise ConfigError("--judge-url and --judge-path are both set: a judge is reached over a server or loaded "
                          "here, not both.")
    if args.judge_url and not args.judge_model:
        raise ConfigError(f"--judge-url {args.judge_url} needs --judge-model: the model name the server serves "
                          f"(GET {args.judge_url.rstrip('/')}/v1/models lists them).")
    if args.judge_max_tokens < 1:
        raise ConfigError(f"--judge-max-tokens must be at least 1, got {args.judge_max_tokens}.")
    from tether.roles.sources import load_rubric

    rubric = load_rubric(args.judge_rubric, "pairwise", "--judge-rubric")
    if args.judge_path:
        from tether.roles.local_judge import LocalJudge

        return LocalJudge(args.judge_path, max_tokens=args.judge_max_tokens, key="--judge-path"), rubric
    from tether.roles.judge_client import JudgeClient

    client = JudgeClient(args.judge_url, args.judge_model, max_tokens=args.judge_max_tokens, key="--judge-url")
    client.check()
    return client, rubric
