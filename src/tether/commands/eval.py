"""`tether eval`: a checkpoint on fixed held-out prompts, with fixed settings and seed.

Reports reward-model score, gold score (with a judge), KL to the reference, length, EOS rate,
repetition; win rates against the reference (SFT) policy by the reward model and by the judge;
responses side by side; optionally best-of-N of the reference policy. Same checkpoint + seed
→ same numbers. Writes ``--out`` (JSON) and prints a table.
"""

from __future__ import annotations

import sys


def register(sub) -> None:
    p = sub.add_parser("eval", help="Evaluate a policy on held-out prompts against the SFT model.",
                       description=__doc__)
    p.add_argument("--policy", required=True, help="Policy checkpoint (e.g. DIR/ppo).")
    p.add_argument("--reference", required=True, help="Reference/SFT checkpoint: KL and win rates are against it.")
    p.add_argument("--prompts", required=True, help="Held-out prompts (file or hub dataset).")
    p.add_argument("--reward-model", action="append", default=[], help="Reward model checkpoint (repeat for an ensemble mean).")
    p.add_argument("--judge", default=None, help="Gold judge `module:function(prompt, response, ended)`.")
    p.add_argument("--max-prompts", type=int, default=128, help="Use at most this many prompts (default 128).")
    p.add_argument("--samples-per-prompt", type=int, default=4, help="Responses per prompt (default 4).")
    p.add_argument("--max-new-tokens", type=int, default=24, help="Response length cap (default 24).")
    p.add_argument("--temperature", type=float, default=1.0, help="Sampling temperature (default 1.0).")
    p.add_argument("--seed", type=int, default=0, help="Sampling seed (default 0).")
    p.add_argument("--best-of-n", default="", help="Also run best-of-N of the reference, e.g. 1,2,4,8,16.")
    p.add_argument("--out", default=None, help="Write the results here as JSON (default: POLICY/eval.json).")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default).")


def evaluate(args) -> dict:
    from tether.data import encode_prompt, load_records, prompt_examples, prompt_text
    from tether.eval.best_of_n import best_of_n
    from tether.eval.sampling import evaluate_policy
    from tether.eval.win_rate import policy_vs_sft
    from tether.models import load_causal_lm, load_scalar_model, load_tokenizer
    from tether.roles import EnsembleReward, ModelReward, import_callable
    from tether.rollout import SamplingParams
    from tether.runs import set_threads

    set_threads(args.threads)
    tokenizer = load_tokenizer(args.reference)
    examples = prompt_examples(load_records(args.prompts))[: args.max_prompts]
    ids = [encode_prompt(ex.prompt, tokenizer) for ex in examples] * args.samples_per_prompt
    texts = [prompt_text(ex.prompt) for ex in examples] * args.samples_per_prompt
    policy = load_causal_lm(args.policy, tokenizer)
    reference = load_causal_lm(args.reference, tokenizer)
    rms = [ModelReward(load_scalar_model(p, tokenizer), p) for p in args.reward_model]
    reward = rms[0] if len(rms) == 1 else EnsembleReward(rms) if rms else None
    judge = import_callable(args.judge) if args.judge else None
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    pol = evaluate_policy(policy, tokenizer, ids, texts, params, args.seed, reward, reference, judge)
    ref = evaluate_policy(reference, tokenizer, ids, texts, params, args.seed, reward, reference, judge)
    result = {
        "settings": {k: v for k, v in vars(args).items() if k != "func"},
        "policy": pol.summary(),
        "reference": ref.summary(),
        "win_rate_vs_reference": policy_vs_sft(pol, ref),
        "samples": [{"prompt": p, "reference": r, "policy": q}
                    for p, r, q in list(zip(texts, ref.responses, pol.responses))[:16]],
    }
    if args.best_of_n:
        if reward is None:
            from tether.errors import ConfigError

            raise ConfigError("--best-of-n needs --reward-model to pick the best sample.")
        ns = tuple(int(x) for x in args.best_of_n.split(","))
        result["best_of_n"] = best_of_n(reference, tokenizer, ids[: len(examples)], texts[: len(examples)],
                                        reward, judge, ns, params, args.seed)
    return result


def format_result(result: dict) -> str:
    keys = ["proxy_score", "gold_score", "kl", "length_mean", "eos_rate", "repetition", "entropy"]
    lines = [f"{'':<14}{'reference':>12}{'policy':>12}"]
    for k in keys:
        a, b = result["reference"].get(k), result["policy"].get(k)
        if a is None and b is None:
            continue
        lines.append(f"{k:<14}{a if a is None else f'{a:+.3f}':>12}{b if b is None else f'{b:+.3f}':>12}")
    wr = result["win_rate_vs_reference"]
    for k in ("win_rate_proxy", "win_rate_gold"):
        if wr.get(k) is not None:
            lines.append(f"{k:<14}{'':>12}{wr[k]:>12.3f}")
    for row in result.get("best_of_n", []):
        gold = "" if row["gold_score"] is None else f", gold {row['gold_score']:+.3f}"
        lines.append(f"best-of-{row['n']:<3} KL {row['kl_analytic']:.2f}: proxy {row['proxy_score']:+.3f}{gold}")
    return "\n".join(lines)


def run(args) -> int:
    from pathlib import Path

    from tether.runs import write_json

    result = evaluate(args)
    out = Path(args.out) if args.out else Path(args.policy) / "eval.json"
    write_json(out, result)
    print(format_result(result))
    print(f"written: {out}", file=sys.stderr)
    return 0
