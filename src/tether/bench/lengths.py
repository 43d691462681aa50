"""The rows of `tether bench --stage`: which stages it runs, the lengths of their rows (the demo
task's, or long-tailed), and random token ids of those lengths."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from tether.bench.setup import SPECIALS

SUPERVISED_STAGES = ("sft", "rm", "dpo")
LENGTHS = ("demo", "longtail")
PAIR_STAGES = ("rm", "dpo")
#: Long-tailed lengths: log-normal with median e^mu = 128 tokens and sigma 1 (the 90th percentile
#: is 461 tokens, the 99th clipped to 1024), for prompts and responses alike, clipped to [8, 1024].
LONGTAIL_MU = math.log(128)
LONGTAIL_SIGMA = 1.0
LENGTH_RANGE = (8, 1024)
#: The bench models' context: a prompt and a response of 1024 tokens each.
MAX_POSITIONS = 2 * LENGTH_RANGE[1]


def rl_stages() -> tuple[str, ...]:
    """The RL stages: every registered algorithm (tether.registry.algorithms)."""
    from tether.registry.algorithms import ALGORITHMS, load_plugins

    load_plugins()
    return tuple(ALGORITHMS)


def stages() -> tuple[str, ...]:
    return SUPERVISED_STAGES + rl_stages()


def needs_critic(stage: str) -> bool:
    from tether.registry.algorithms import algorithm_spec

    return stage in rl_stages() and algorithm_spec(stage).needs_critic


def update_passes(stage: str) -> int:
    """Full passes over the batch per step: the update's trained models (the actor and a critic)."""
    return 2 if needs_critic(stage) else 1


def scoring_passes(stage: str) -> tuple[str, ...]:
    """The RL loop's scoring passes (their timer names)."""
    return ("logprobs", "ref_logprobs") + (("values",) if needs_critic(stage) else ()) + ("reward",)


@dataclass(frozen=True)
class Lengths:
    """Token counts of a step's rows: ``prompts`` and ``responses`` (N,) each; ``rejected`` (N,)
    the second response of each pair (RM, DPO), else None. RL rows repeat their prompt's length
    over its group (consecutive rows)."""

    prompts: list[int]
    responses: list[int]
    rejected: list[int] | None = None


def row_kind(stage: str) -> str:
    """What a stage's rows are (its lengths' random stream): RM and DPO draw the same pairs, PPO
    and GRPO the same prompts."""
    return "pairs" if stage in PAIR_STAGES else "rl" if stage in rl_stages() else stage


def lognormal_lengths(n: int, rng: random.Random, mu: float = LONGTAIL_MU, sigma: float = LONGTAIL_SIGMA,
                      bounds: tuple[int, int] = LENGTH_RANGE) -> list[int]:
    """``n`` lengths ``round(exp(N(mu, sigma)))`` clipped to ``bounds`` (inclusive)."""
    lo, hi = bounds
    return [min(hi, max(lo, round(rng.lognormvariate(mu, sigma)))) for _ in range(n)]


def longtail_lengths(stage: str, rows: int, group: int = 1, seed: int = 0) -> Lengths:
    """Log-normal prompt and response lengths (:data:`LONGTAIL_MU`, :data:`LONGTAIL_SIGMA`) for
    ``rows`` rows (RL: ``rows`` prompts, each with ``group`` responses), from ``seed``."""
    rng = random.Random(f"tether/bench/longtail/{row_kind(stage)}/{seed}")
    prompts = lognormal_lengths(rows, rng)
    if stage in rl_stages():
        return Lengths([p for p in prompts for _ in range(group)], lognormal_lengths(rows * group, rng))
    responses = lognormal_lengths(rows, rng)
    return Lengths(prompts, responses, lognormal_lengths(rows, rng) if stage in PAIR_STAGES else None)


def demo_lengths(stage: str, rows: int, group: int = 1, seed: int = 0) -> Lengths:
    """The demo task's lengths (tether.tasks.arith, built in memory from ``seed``), as its
    tokenizer and chat template encode them: SFT rows from its demonstrations, RM and DPO pairs
    from its preference pairs, RL prompts from its facts with the weak sampler's responses (what
    the SFT policy imitates) as the responses; every response ends with EOS."""
    from tether.data import encode_prompt, encode_response
    from tether.tasks.arith import build, world
    from tether.tasks.arith.tokenizer import build_tokenizer

    tok = build_tokenizer()
    rng = random.Random(f"tether/bench/demo/{row_kind(stage)}/{seed}")

    def prompt(text: str) -> int:
        return len(encode_prompt([{"role": "user", "content": text}], tok))

    def response(text: str) -> int:
        return len(encode_response(text, tok))

    if stage == "sft":
        msgs = [r["messages"] for r in build.sft_rows(rng, rows)]
        return Lengths([prompt(m[0]["content"]) for m in msgs], [response(m[1]["content"]) for m in msgs])
    if stage in PAIR_STAGES:
        pairs = build.preference_rows(rng, rows)
        return Lengths([prompt(p["prompt"]) for p in pairs], [response(p["chosen"]) for p in pairs],
                       [response(p["rejected"]) for p in pairs])
    facts = [rng.choice(world.PROMPTS) for _ in range(rows)]
    return Lengths([prompt(f) for f in facts for _ in range(group)],
                   [response(world.sample_weak_response(rng, f)) for f in facts for _ in range(group)])


def step_lengths(kind: str, stage: str, rows: int, group: int = 1, seed: int = 0) -> Lengths:
    if kind == "longtail":
        return longtail_lengths(stage, rows, group, seed)
    if kind == "demo":
        return demo_lengths(stage, rows, group, seed)
    raise ValueError(f"lengths must be one of {LENGTHS}, got {kind!r}")


def padded_tokens(stage: str, lengths: Lengths) -> tuple[int, int]:
    """(real tokens, tokens of the padded batch) of one pass over a step's rows, from the shapes
    each stage's collation gives: SFT right-pads prompt + response to the longest row; RM
    right-pads the 2N sequences (prompt + chosen, prompt + rejected) to the longest; DPO and the
    RL rollout left-pad the prompts to the longest prompt and right-pad the responses (DPO: 2N
    of them) to the longest response.

    E.g. SFT rows of (prompt, response) (10, 5) and (20, 15): real 50 of 2 x 35 = 70.
    """
    p, r, j = lengths.prompts, lengths.responses, lengths.rejected
    if stage == "sft":
        seqs = [a + b for a, b in zip(p, r)]
        return sum(seqs), len(seqs) * max(seqs)
    if stage == "rm":
        seqs = [a + b for a, b in zip(p, r)] + [a + b for a, b in zip(p, j)]
        return sum(seqs), len(seqs) * max(seqs)
    if stage == "dpo":
        return 2 * sum(p) + sum(r) + sum(j), 2 * len(p) * (max(p) + max(r + j))
    if stage in rl_stages():
        return sum(p) + sum(r), len(p) * (max(p) + max(r))
    raise ValueError(f"stage must be one of {stages()}, got {stage!r}")


def padding_fraction(real: float, computed: float) -> float:
    """Padding's share of the computed tokens: 1 - real / computed (0 when nothing was computed)."""
    return 1.0 - real / computed if computed else 0.0


def random_rows(lengths: Lengths, vocab: int, seed: int = 0) -> list[tuple[list[int], ...]]:
    """Each row's token ids: (prompt, response) or (prompt, chosen, rejected), drawn uniformly
    from the non-special ids (``len(SPECIALS)`` .. ``vocab - 1``)."""
    gen = torch.Generator().manual_seed(seed)
    low = len(SPECIALS)

    def ids(n: int) -> list[int]:
        return torch.randint(low, vocab, (n,), generator=gen).tolist()

    if lengths.rejected is None:
        return [(ids(a), ids(b)) for a, b in zip(lengths.prompts, lengths.responses)]
    return [(ids(a), ids(b), ids(c)) for a, b, c in zip(lengths.prompts, lengths.responses, lengths.rejected)]
