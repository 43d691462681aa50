"""Comparison pairs to label (`tether pairs`), sampled by one of three strategies:

- ``temperature``: two samples of one policy at a temperature (how the InstructGPT labellers
  saw outputs of one model);
- ``checkpoints``: one sample each of two policies, head to head (e.g. SFT vs the PPO model);
- ``best_worst``: N samples of one policy, the reward model's best against its worst (the
  comparisons the current reward model is most sure of, to check or to correct).

Pairs whose two responses are identical are dropped and counted (they teach a reward model
nothing), and so are pairs with an empty response (the preference schema needs text on both
sides). Each row carries its provenance.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

STRATEGIES = ("temperature", "checkpoints", "best_worst")


@dataclass(frozen=True)
class PairSpec:
    strategy: str
    policy_a: str
    policy_b: str | None = None
    reward_model: str | None = None
    temperature: float = 1.0
    n: int = 4
    max_new_tokens: int = 24
    seed: int = 0


def pair_id(prompt: str, a: str, b: str, index: int) -> str:
    return f"p{index:05d}-" + hashlib.sha1(f"{prompt}\0{a}\0{b}".encode()).hexdigest()[:8]


def sample_pairs(spec: PairSpec, prompts: list[str], prompt_ids: list[list[int]], tokenizer, engine: str = "lean",
                 settings=None) -> tuple[list[dict], dict]:
    """Rows (pair_id, prompt, response_a, response_b, provenance) and counts."""
    from tether.eval.policies import measured_policy, measured_reward
    from tether.models import load_causal_lm, load_scalar_model
    from tether.rollout import SamplingParams

    params = SamplingParams(max_new_tokens=spec.max_new_tokens, temperature=spec.temperature)
    sampler = measured_policy(load_causal_lm(spec.policy_a, tokenizer, key="--policy"), tokenizer, spec.temperature,
                              engine, settings, path=spec.policy_a).sampler
    provenance = {"strategy": spec.strategy, "policy_a": spec.policy_a, "temperature": spec.temperature,
                  "seed": spec.seed}
    scores = None
    if spec.strategy == "temperature":
        ro = sampler.generate([p for p in prompt_ids for _ in range(2)], [t for t in prompts for _ in range(2)],
                              params, seed=spec.seed)
        candidates = [[ro.responses[2 * i], ro.responses[2 * i + 1]] for i in range(len(prompts))]
    elif spec.strategy == "checkpoints":
        other = measured_policy(load_causal_lm(spec.policy_b, tokenizer, key="--policy-b"), tokenizer,
                                spec.temperature, engine, settings, path=spec.policy_b).sampler
        first = sampler.generate(prompt_ids, prompts, params, seed=spec.seed)
        second = other.generate(prompt_ids, prompts, params, seed=spec.seed + 1)
        candidates = [[a, b] for a, b in zip(first.responses, second.responses)]
        provenance["policy_b"] = spec.policy_b
    else:
        ro = sampler.generate([p for p in prompt_ids for _ in range(spec.n)],
                              [t for t in prompts for _ in range(spec.n)], params, seed=spec.seed)
        reward = measured_reward(load_scalar_model(spec.reward_model, tokenizer, key="--reward-model"), settings)
        all_scores = [float(s) for s in reward.score(ro)]
        candidates, scores = [], []
        for i in range(len(prompts)):
            group = list(range(i * spec.n, (i + 1) * spec.n))
            best = max(group, key=lambda j: all_scores[j])
            worst = min(group, key=lambda j: all_scores[j])
            candidates.append([ro.responses[best], ro.responses[worst]])
            scores.append([all_scores[best], all_scores[worst]])
        provenance.update(n=spec.n, reward_model=spec.reward_model)
    rows, identical, empty = [], 0, 0
    for i, (prompt, (a, b)) in enumerate(zip(prompts, candidates)):
        if a == b:
            identical += 1
            continue
        if not a.strip() or not b.strip():  # the preference schema needs text on both sides
            empty += 1
            continue
        extra = {"scores": scores[i]} if scores else {}
        rows.append({"pair_id": pair_id(prompt, a, b, i), "prompt": prompt, "response_a": a, "response_b": b,
                     "provenance": {**provenance, **extra}})
    return rows, {"pairs": len(rows), "identical_dropped": identical, "empty_dropped": empty, "prompts": len(prompts)}
