"""Best-of-N sampling: the no-training baseline PPO is compared against.

Sample N responses per prompt from the SFT policy, keep the one the reward model likes best.
Its KL to the sampling policy has a closed form (Stiennon et al. 2020, app. G.3; Gao et al. 2022
eq. 1), so best-of-N traces a proxy/gold-vs-KL curve with no RL at all; reference text 003 notes
that best-of-64 can match PPO quality. Plot it beside PPO's points: ``tether.plots.frontier_plot``.

    rows = best_of_n(sft_engine, prompt_ids, prompts, ModelReward(rm), gold_score,
                     ns=(1, 2, 4, 8, 16), params=SamplingParams(max_new_tokens=24), seed=0)
    # [{"n": 1, "kl_analytic": 0.0, "proxy_score": ..., "gold_score": ...}, ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from tether.eval.sampling import seeded_rollouts
from tether.rollout import SamplingParams


def best_of_n_kl(n: int) -> float:
    """KL(best-of-n || base) = log n - (n - 1) / n nats.

The standard analytic value (Stiennon et al. 2020; Gao et al. 2022). Strictly it is an upper
bound on the true KL, approached when no single response carries much probability
(Beirami et al. 2024). ``best_of_n_kl(1) == 0``; ``best_of_n_kl(4) = log 4 - 3/4 = 0.6363``.
"""
    if n < 1:
        raise ValueError(f"best-of-n needs n >= 1, got {n}")
    return math.log(n) - (n - 1) / n


def select_best(proxy: Sequence[Sequence[float]], gold: Sequence[Sequence[float]] | None,
                ns: Sequence[int]) -> list[dict]:
    """Best-of-n rows from per-prompt score lists ``proxy[i][k]`` (sample k of prompt i).

    For each n, the first n samples of every prompt compete; the proxy favourite (first one on
    ties) is kept and its proxy and gold scores are averaged over prompts. Because the same
    samples are reused, the proxy column is non-decreasing in n.
    """
    if not proxy:
        raise ValueError("best-of-n needs at least one prompt")
    width = min(len(row) for row in proxy)
    rows = []
    for n in sorted(set(ns)):
        if n > width:
            raise ValueError(f"best-of-{n} needs {n} samples per prompt, only {width} were drawn")
        picked = [max(range(n), key=lambda k, row=row: (row[k], -k)) for row in proxy]
        rows.append({
            "n": n,
            "kl_analytic": best_of_n_kl(n),
            "proxy_score": sum(row[k] for row, k in zip(proxy, picked)) / len(proxy),
            "gold_score": None if gold is None else sum(g[k] for g, k in zip(gold, picked)) / len(gold),
        })
    return rows


@torch.no_grad()
def best_of_n(
    engine,
    prompt_ids: list[list[int]],
    prompts: list[str],
    reward,
    judge: Callable[[str, str, bool], float] | None = None,
    ns: Sequence[int] = (1, 2, 4, 8, 16),
    params: SamplingParams | None = None,
    seed: int = 0,
    batch_size: int = 128,
) -> list[dict]:
    """Best-of-n for every n in ``ns`` from one set of max(ns) samples per prompt.

    ``engine`` is the generation engine of the policy (the SFT model's); ``reward`` a reward
    source (``.score(rollout) -> (B,)``: ``ModelReward``, ``CallableReward``, ``EnsembleReward``);
    ``judge(prompt, response, ended) -> float`` the optional gold judge. Sampling is reproducible
    from ``seed`` and leaves the global RNG alone. Returns one row per n, ascending:
    ``{"n", "kl_analytic", "proxy_score", "gold_score"}`` (``gold_score`` is None without a
    judge; scores are means over prompts).
    """
    if not prompt_ids or len(prompt_ids) != len(prompts):
        raise ValueError(f"best_of_n needs matching non-empty prompt_ids and prompts "
                         f"(got {len(prompt_ids)} and {len(prompts)})")
    params = params or SamplingParams()
    n_max = max(ns)
    p = len(prompt_ids)
    # Sample k of prompt i sits at index k * p + i: the first n samples are a prefix per prompt.
    flat_proxy: list[float] = []
    flat_gold: list[float] = []
    for ro in seeded_rollouts(engine, prompt_ids * n_max, prompts * n_max, params, seed, batch_size):
        flat_proxy += [float(x) for x in reward.score(ro).tolist()]
        if judge is not None:
            flat_gold += [float(judge(q, r, bool(e))) for q, r, e in zip(ro.prompts, ro.responses, ro.ended.tolist())]
    proxy = [[flat_proxy[k * p + i] for k in range(n_max)] for i in range(p)]
    gold = [[flat_gold[k * p + i] for k in range(n_max)] for i in range(p)] if judge is not None else None
    return select_best(proxy, gold, ns)


__all__ = ["best_of_n", "best_of_n_kl", "select_best"]
