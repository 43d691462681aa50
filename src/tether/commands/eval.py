"""`tether eval`: a checkpoint on fixed held-out prompts, with fixed settings and seed.

Reports reward-model score, gold score (with a judge), KL to the reference, length, EOS rate,
repetition; win rates against the reference (SFT) policy by the reward model and by the judge;
responses side by side; optionally best-of-N of the reference policy. With ``--environment`` both
policies run episodes of the environment a run was trained with (turns, tool calls and errors,
truncation reported; the judge scores each episode's final answer). Same checkpoint + seed
→ same numbers. Writes ``--out`` (JSON) and prints a table.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tether.registry.engines import DEFAULT_ENGINE, engine_names

MIN_TEMPERATURE = 1e-6  # below it logits / temperature can overflow float32 (NaN probabilities)
MAX_SAMPLES = 1_000_000  # responses per prompt (--samples-per-prompt, best-of-N sizes)
SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.manual_seed accepts
MAX_THREADS = 1024  # as run.threads in the stages


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
    p.add_argument("--max-new-tokens", type=int, default=24,
                   help="Response length cap (default 24); prompt + this must fit every model's context.")
    p.add_argument("--temperature", type=float, default=1.0,
                   help=f"Sampling temperature (default 1.0): 0 = greedy decoding, else >= {MIN_TEMPERATURE:g}.")
    p.add_argument("--seed", type=int, default=0, help="Sampling seed (default 0).")
    p.add_argument("--best-of-n", default="",
                   help="Also run best-of-N of the reference, e.g. 1,2,4,8,16 (needs --reward-model).")
    p.add_argument("--out", default=None, help="Write the results here as JSON (default: POLICY/eval.json).")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = default).")
    p.add_argument("--engine", default=DEFAULT_ENGINE, choices=sorted(engine_names()),
                   help=f"Generation engine, as rollout.engine in training (default {DEFAULT_ENGINE}).")
    p.add_argument("--device", default="auto", help="auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps.")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="fp32, or bf16/fp16 autocast (default fp32).")
    p.add_argument("--environment", default=None, metavar="RUN_OR_YAML",
                   help="Run episodes: the environment block of a run directory's config.yaml (or of a YAML file), "
                        "e.g. the policy's own run; --prompts are then episode rows of that kind and "
                        "--max-new-tokens caps each turn (docs/episodes.md).")


# -- argument checks: all of them run before any model, tokenizer or config is loaded ------------


def _shown(value: object) -> str:
    """A user's value as it can be quoted on one line (control characters escaped)."""
    text = str(value)
    return text if text.isprintable() else repr(text)[1:-1]


def _fail(message: str):
    from tether.common.errors import ConfigError

    return ConfigError(message)


@dataclass(frozen=True)
class CheckedArgs:
    """What :func:`check_args` derived from the arguments."""

    best_of_n: tuple[int, ...]  # () = no best-of-N
    out: Path  # where the JSON goes
    judge: object | None  # the imported judge callable
    environment: object | None = None  # the --environment block (EnvironmentConfig), or None


def _nonempty(flag: str, value: str | None, expected: str) -> None:
    if value is not None and not value.strip():
        raise _fail(f"{flag} is empty ({value!r}); expected {expected}.")


def _int_in(flag: str, value: int, low: int, high: int | None, meaning: str) -> None:
    if value < low or (high is not None and value > high):
        bounds = f"at least {low}" if high is None else f"from {low} to {high}"
        raise _fail(f"{flag} must be {bounds} ({meaning}), got {value}.")


def parse_best_of_n(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` -> (1, 2, 4); "" -> (). Duplicates are allowed (each size is reported once)."""
    if text == "":
        return ()
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not re.fullmatch(r"\+?[0-9]+", item) or not 1 <= int(item) <= MAX_SAMPLES:
            what = "an empty item" if not item else f"'{_shown(item)}'"
            raise _fail(
                f"--best-of-n '{_shown(text)}': {what} is not a sample count; expected comma-separated "
                f"integers from 1 to {MAX_SAMPLES}, e.g. 1,2,4,8,16."
            )
        sizes.append(int(item))
    return tuple(sizes)


def output_path(args) -> Path:
    """``--out`` (default POLICY/eval.json), checked to be writable before anything runs."""
    from tether.common.outputs import check_output_file

    if args.out is not None:
        return check_output_file(args.out, "--out", example="eval.json")
    out = Path(args.policy) / "eval.json"
    return check_output_file(out, "--out", what=f"--out is not given and the default '{_shown(out)}' (in the "
                             "--policy directory)", hint="give --out FILE", example="eval.json")


def _import_judge(spec: str):
    from tether.common.errors import TetherError
    from tether.common.targets import import_callable

    try:
        return import_callable(spec)
    except TetherError as err:
        raise _fail(f"--judge '{_shown(spec)}': {err}") from None
    except Exception as err:  # noqa: BLE001 - the module raised while importing
        reason = " ".join(str(err).split())
        raise _fail(f"--judge '{_shown(spec)}': importing it failed ({type(err).__name__}: {reason}); "
                    "expected 'module:function' naming an importable function(prompt, response, ended).") from None


def check_args(args) -> CheckedArgs:
    """Every argument alone and in combination; a ConfigError naming the flag on the first bad one."""
    expected_model = "a local checkpoint directory or a hub id"
    _nonempty("--policy", args.policy, expected_model)
    _nonempty("--reference", args.reference, expected_model)
    _nonempty("--prompts", args.prompts, "a .jsonl, .json or .parquet file or a hub dataset name")
    for path in args.reward_model:
        _nonempty("--reward-model", path, expected_model)
    _nonempty("--judge", args.judge, "'module:function'")
    _nonempty("--out", args.out, "a file path (omit --out to write POLICY/eval.json)")
    _int_in("--max-prompts", args.max_prompts, 1, None, "prompts to evaluate")
    _int_in("--samples-per-prompt", args.samples_per_prompt, 1, MAX_SAMPLES, "responses per prompt")
    _int_in("--max-new-tokens", args.max_new_tokens, 1, None, "the response length cap in tokens")
    _int_in("--threads", args.threads, 0, MAX_THREADS, "torch threads; 0 = the default")
    from tether.common.runtime import resolve_device

    resolve_device(args.device, "--device")
    low, high = SEED_RANGE
    if not low <= args.seed <= high:
        raise _fail(f"--seed must be an integer from -2**63 to 2**64-1 (the range torch accepts), got {args.seed}.")
    t = args.temperature
    if not math.isfinite(t) or not (t == 0 or t >= MIN_TEMPERATURE):
        raise _fail(f"--temperature must be 0 (greedy decoding) or a finite number >= {MIN_TEMPERATURE:g}, "
                    f"got {t}.")
    sizes = parse_best_of_n(args.best_of_n)
    if sizes and not args.reward_model:
        raise _fail(f"--best-of-n {_shown(args.best_of_n)} needs --reward-model to pick the best sample.")
    if sizes and t == 0:
        raise _fail(f"--best-of-n {_shown(args.best_of_n)} needs sampling, but --temperature 0 is greedy decoding "
                    "(all N samples would be the same response); use a temperature > 0.")
    environment = None
    if getattr(args, "environment", None) is not None:
        from tether.eval.environment import environment_block

        _nonempty("--environment", args.environment, "a run directory or a YAML file with an `environment:` block")
        environment = environment_block(args.environment)
        if sizes:
            raise _fail(f"--best-of-n {_shown(args.best_of_n)} with --environment: best-of-N samples single "
                        "responses; evaluate episodes without it.")
    out = output_path(args)
    judge = _import_judge(args.judge) if args.judge else None
    return CheckedArgs(best_of_n=sizes, out=out, judge=judge, environment=environment)


# -- checks against the models' contexts: configs only, before any weights are loaded -----------


def smallest_context(args) -> tuple[int, str] | None:
    """The smallest context (positions) of the policy, reference and reward models, and whose it is."""
    from tether.eval.context import smallest_context as models_context

    roles = [("policy", "--policy", args.policy), ("reference", "--reference", args.reference)]
    return models_context(roles + [("reward model", "--reward-model", path) for path in args.reward_model])


def evaluate(args, checked: CheckedArgs | None = None) -> dict:
    from tether.data import prompt_text
    from tether.engines import EngineSettings
    from tether.eval.best_of_n import best_of_n
    from tether.eval.context import checked_prompts
    from tether.eval.policies import measured_policy, measured_reward
    from tether.eval.sampling import evaluate_policy
    from tether.eval.win_rate import policy_vs_sft
    from tether.models import load_causal_lm, load_scalar_model
    from tether.roles import EnsembleReward
    from tether.rollout import SamplingParams, check_frozen
    from tether.runs import set_threads
    from tether.common.runtime import Precision, resolve_device

    checked = checked or check_args(args)
    set_threads(args.threads)
    env = checked.environment
    if env is None:
        tokenizer, examples, prompt_ids = checked_prompts(args, smallest_context(args), args.reference, "--reference",
                                                          "evaluate")
        prompt_texts, rows = [prompt_text(ex.prompt) for ex in examples], None
    else:
        tokenizer, prompt_ids, prompt_texts, rows = _episode_prompts(args, env)
    check_frozen(args.engine, (args.policy, args.reference))  # what would stop the engine, before any weights load
    ids = prompt_ids * args.samples_per_prompt
    texts = prompt_texts * args.samples_per_prompt
    settings = EngineSettings(resolve_device(args.device, "--device"), Precision(args.precision))
    # Log-probs at the sampling temperature (greedy decoding: the plain distribution).
    temperature = 1.0 if args.temperature == 0 else args.temperature
    policy, reference = (
        measured_policy(load_causal_lm(path, tokenizer, key=flag), tokenizer, temperature, args.engine, settings,
                        path=str(path))
        for path, flag in ((args.policy, "--policy"), (args.reference, "--reference")))
    rms = [measured_reward(load_scalar_model(p, tokenizer, key="--reward-model"), settings, p)
           for p in args.reward_model]
    reward = rms[0] if len(rms) == 1 else EnsembleReward(rms) if rms else None
    judge = checked.judge
    if args.temperature == 0:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, greedy=True)
    else:
        params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    samplers = [policy.sampler, reference.sampler]
    if env is not None:  # each samples the episodes of the run's environment
        from tether.eval.environment import episode_spec

        spec = episode_spec(env, args.max_new_tokens)
        samplers = [spec.wrap(sampler, tokenizer) for sampler in samplers]
    episode_rows = None if rows is None else rows * args.samples_per_prompt
    try:
        pol, ref = (evaluate_policy(sampler, role.policy, ids, texts, params, args.seed, reward, reference.policy,
                                    judge, rows=episode_rows)
                    for sampler, role in zip(samplers, (policy, reference)))
    finally:
        if env is not None:
            for sampler in samplers:
                sampler.environments.close()  # the tool threads (the engines are the measured policies')
    result = {
        "settings": {k: v for k, v in vars(args).items() if k != "func"},
        "policy": pol.summary(),
        "reference": ref.summary(),
        "win_rate_vs_reference": policy_vs_sft(pol, ref),
        "samples": _samples(texts, ref, pol)[:16],
    }
    if checked.best_of_n:
        n = len(prompt_ids)
        result["best_of_n"] = best_of_n(reference.sampler, ids[:n], texts[:n], reward, judge, checked.best_of_n,
                                        params, args.seed)
    return result


def _episode_prompts(args, env):
    """(tokenizer, prompt ids, texts, rows) of the episode rows of ``--prompts``, checked before any
    weights load (:func:`tether.eval.environment.episode_prompts`)."""
    from tether.eval.context import check_new_tokens
    from tether.eval.environment import episode_prompts
    from tether.models import load_tokenizer

    context = smallest_context(args)
    check_new_tokens(args.max_new_tokens, context)
    tokenizer = load_tokenizer(args.reference, key="--reference")
    ids, texts, rows = episode_prompts(args.prompts, tokenizer, env, args.max_prompts,
                                       env.budget(args.max_new_tokens), context)
    return tokenizer, ids, texts, rows


def _samples(texts: list[str], ref, pol) -> list[dict]:
    """The responses side by side; with episodes, each one's whole conversation too."""
    rows = [{"prompt": p, "reference": r, "policy": q} for p, r, q in zip(texts, ref.responses, pol.responses)]
    if pol.conversations is not None:
        for row, r, q in zip(rows, ref.conversations, pol.conversations):
            row.update(reference_episode=r, policy_episode=q)
    return rows


def format_result(result: dict) -> str:
    keys = ["proxy_score", "gold_score", "kl", "length_mean", "eos_rate", "repetition", "entropy"]
    episodes = sorted(set(result["reference"].get("episodes", {})) | set(result["policy"].get("episodes", {})))
    lines = [f"{'':<14}{'reference':>12}{'policy':>12}"]
    for k in keys + episodes:
        a, b = (side.get(k, side.get("episodes", {}).get(k)) for side in (result["reference"], result["policy"]))
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
    from tether.runs import write_json

    checked = check_args(args)  # every argument, before anything slow
    result = evaluate(args, checked)
    out = checked.out
    write_json(out, result)
    print(format_result(result))
    print(f"written: {out}", file=sys.stderr)
    return 0
