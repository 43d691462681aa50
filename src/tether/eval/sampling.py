"""Sample a policy on fixed prompts with a fixed seed and score what it wrote.

Same checkpoint + same seed + same settings → same numbers: the generation engine samples under
a private RNG stream seeded from ``seed`` (in chunks of :data:`CHUNK` prompts, one after the
other), so evaluation neither depends on nor disturbs the training RNG. The engine is the one
``rollout.engine`` configures, as in training; the policy and reference are roles (anything with
``logprobs(rollout, with_entropy)``) at the sampling temperature.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tether.algos import kl_k1, masked_mean, repetition_rate
from tether.environments.base import batch_metrics
from tether.rollout import SamplingParams
from tether.types import select_rows, trim_padding

CHUNK = 128  # prompts per generation batch (and per scoring batch)


@dataclass
class EvalSamples:
    """Per-response measurements, shapes (N,)."""

    prompts: list[str]
    responses: list[str]
    ended: list[bool]
    lengths: list[int]
    proxy: list[float] | None  # reward-model score
    gold: list[float] | None  # judge score
    kl: list[float] | None  # sum over tokens of log pi - log pi_ref (nats/sequence)
    entropy: list[float]  # mean per-token entropy (nats/token)
    #: Episodes: each one's totals (EpisodeStats) and messages; None for single responses.
    episodes: list | None = None
    conversations: list[list[dict]] | None = None

    def summary(self) -> dict:
        def mean(xs):
            return float(sum(xs) / len(xs)) if xs else float("nan")

        out = {
            "length_mean": mean(self.lengths),
            "eos_rate": mean([float(e) for e in self.ended]),
            "entropy": mean(self.entropy),
            "repetition": mean([repetition_rate(r.split(), 2) for r in self.responses]),
            "n": len(self.responses),
        }
        if self.proxy is not None:
            out["proxy_score"] = mean(self.proxy)
        if self.gold is not None:
            out["gold_score"] = mean(self.gold)
        if self.kl is not None:
            out["kl"] = mean(self.kl)
        if self.episodes is not None:  # turns and truncation per episode, each counter per episode
            totals = batch_metrics(self.episodes, prefix="")
            n = len(self.episodes)
            out["episodes"] = {k: v if k in ("turns", "truncated") else v / n for k, v in totals.items()}
        return out


def seeded_rollouts(engine, prompt_ids, prompts, params: SamplingParams, seed: int, chunk_size: int = CHUNK,
                    rows: list[dict] | None = None):
    """The engine's responses to every prompt, reproducible from ``seed``, as chunks of at most
    ``chunk_size`` rows (each trimmed to the shape it was sampled in). ``rows``: the prompt rows an
    episode engine starts its episodes from (a run with an environment)."""
    episodes = {} if rows is None else {"rows": rows}
    rollout = engine.generate(prompt_ids, prompts, params, seed=seed, chunk_size=chunk_size, **episodes)
    for start in range(0, len(rollout), chunk_size):
        index = torch.arange(start, min(start + chunk_size, len(rollout)))
        yield trim_padding(select_rows(rollout, index))


def evaluate_policy(
    engine,
    policy,
    prompt_ids: list[list[int]],
    prompts: list[str],
    params: SamplingParams,
    seed: int = 0,
    reward=None,
    reference=None,
    judge: Callable[[str, str, bool], float] | None = None,
    rows: list[dict] | None = None,
) -> EvalSamples:
    """Sample once per prompt with ``engine`` (an episode per prompt row of ``rows`` with an episode
    engine); score by the reward source, the judge, and KL to ``reference``. ``policy`` gives the
    log-probs and entropies (a fresh forward, not the sampling pass's)."""
    proxy, gold, kl, entropy = [], [], [], []
    responses, ended, lengths, texts, episodes = [], [], [], [], []
    for ro in seeded_rollouts(engine, prompt_ids, prompts, params, seed, rows=rows):
        mask = ro.loss_mask  # KL and entropy over the sampled tokens (not an episode's observations)
        logp, ent = policy.logprobs(ro, with_entropy=True, use_captured=False)
        entropy += masked_mean(ent, mask.to(ent.device), dim=1).tolist()
        if reference is not None:
            ref_logp, _ = reference.logprobs(ro)
            kl += (kl_k1(logp, ref_logp) * mask.to(logp.device)).sum(1).tolist()
        if reward is not None:
            proxy += reward.score(ro).tolist()
        if judge is not None:
            gold += [float(judge(p, r, bool(e))) for p, r, e in zip(ro.prompts, ro.responses, ro.ended.tolist())]
        texts += ro.prompts
        responses += ro.responses
        ended += ro.ended.tolist()
        lengths += ro.lengths.tolist()  # every response token
        episodes += ro.episodes or []
    return EvalSamples(
        prompts=texts,
        responses=responses,
        ended=ended,
        lengths=lengths,
        proxy=proxy if reward is not None else None,
        gold=gold if judge is not None else None,
        kl=kl if reference is not None else None,
        entropy=entropy,
        episodes=[e.stats for e in episodes] if rows is not None else None,
        conversations=[e.messages for e in episodes] if rows is not None else None,
    )
