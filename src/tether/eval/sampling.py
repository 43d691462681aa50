"""Sample a policy on fixed prompts with a fixed seed and score what it wrote.

Same checkpoint + same seed + same settings → same numbers: generation runs inside a forked
RNG seeded from ``seed``, so evaluation neither depends on nor disturbs the training RNG.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from tether.algos import kl_k1, masked_mean, repetition_rate
from tether.models.forward import response_logprobs
from tether.rollout import HFGenerationEngine, SamplingParams
from tether.types import Rollout


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
        return out


def generate_seeded(model, tokenizer, prompt_ids, prompts, params: SamplingParams, seed: int, batch_size: int = 128) -> list[Rollout]:
    """Rollouts in chunks of ``batch_size``, reproducible from ``seed``."""
    engine = HFGenerationEngine(model, tokenizer)
    chunks = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(prompt_ids), batch_size):
            chunks.append(engine.generate(prompt_ids[start : start + batch_size], prompts[start : start + batch_size], params))
    return chunks


@torch.no_grad()
def evaluate_policy(
    model,
    tokenizer,
    prompt_ids: list[list[int]],
    prompts: list[str],
    params: SamplingParams,
    seed: int = 0,
    reward=None,
    reference=None,
    judge: Callable[[str, str, bool], float] | None = None,
) -> EvalSamples:
    """Sample once per prompt; score by the reward source, the judge, and KL to ``reference``."""
    model.eval()
    proxy, gold, kl, entropy = [], [], [], []
    responses, ended, lengths, texts = [], [], [], []
    temperature = params.temperature if not params.greedy else 1.0
    for ro in generate_seeded(model, tokenizer, prompt_ids, prompts, params, seed):
        mask = ro.response_mask
        logp, ent = response_logprobs(model, ro.sequences, ro.attention_mask, ro.num_prompt_tokens, temperature, True)
        entropy += masked_mean(ent, mask, dim=1).tolist()
        if reference is not None:
            ref_logp, _ = response_logprobs(reference, ro.sequences, ro.attention_mask, ro.num_prompt_tokens, temperature)
            kl += (kl_k1(logp, ref_logp) * mask).sum(1).tolist()
        if reward is not None:
            proxy += reward.score(ro).tolist()
        if judge is not None:
            gold += [float(judge(p, r, bool(e))) for p, r, e in zip(ro.prompts, ro.responses, ro.ended.tolist())]
        texts += ro.prompts
        responses += ro.responses
        ended += ro.ended.tolist()
        lengths += mask.sum(1).tolist()
    return EvalSamples(
        prompts=texts,
        responses=responses,
        ended=ended,
        lengths=lengths,
        proxy=proxy if reward is not None else None,
        gold=gold if judge is not None else None,
        kl=kl if reference is not None else None,
        entropy=entropy,
    )
