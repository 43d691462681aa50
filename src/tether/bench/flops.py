"""FLOPs of the work one PPO iteration needs, per phase. Pure arithmetic, no torch.

The count follows the usual convention: a forward pass costs 2·N FLOPs per token and a
forward + backward 6·N, where N counts the matmul weights a token meets. Attention scores,
norms, activations and the optimiser are not counted (they are small or memory-bound), and
the LM head (hidden × vocab) counts only at the positions whose log-prob PPO reads: the
response positions. The scalar head of the critic and reward model is hidden × 1.

The token counts are the caller's: :mod:`tether.bench.runner` reports the issue's convention
(every episode as long as the batch's longest prompt plus its response: the left-padded rollout
batch, ~330 GFLOP per update at "small") and, beside it, each episode's own real tokens.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelDims:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    kv_heads: int | None = None

    @property
    def trunk_params(self) -> int:
        """Matmul weights of the decoder layers: q, k, v, o and the gated MLP (Llama layout)."""
        h, kv = self.hidden, self.kv_heads or self.heads
        head_dim = h // self.heads
        attention = h * h + 2 * h * kv * head_dim + h * h  # q, k, v, o
        mlp = 3 * h * self.ffn  # gate, up, down
        return self.layers * (attention + mlp)

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab

    @property
    def total_params(self) -> int:
        """Trunk + LM head + input embedding (untied) + the norm weights: the model's size."""
        norms = (2 * self.layers + 1) * self.hidden
        return self.trunk_params + 2 * self.lm_head_params + norms


def policy_forward(d: ModelDims, tokens: int, response_tokens: int) -> int:
    """One causal-LM forward over ``tokens`` real tokens, LM head at ``response_tokens`` of them."""
    return 2 * (d.trunk_params * tokens + d.lm_head_params * response_tokens)


def scalar_forward(d: ModelDims, tokens: int, head_positions: int) -> int:
    """One scalar-head forward over ``tokens`` real tokens, head read at ``head_positions``."""
    return 2 * (d.trunk_params * tokens + d.hidden * head_positions)


def generate(d: ModelDims, prompt_tokens: int, response_tokens: int) -> int:
    """Sampling ``response_tokens`` after ``prompt_tokens``: every token but the last sampled one
    goes through the trunk once (KV cache), and the head runs once per sampled token."""
    return 2 * (d.trunk_params * (prompt_tokens + response_tokens - 1) + d.lm_head_params * response_tokens)


def iteration_flops(
    policy: ModelDims,
    value: ModelDims,
    prompt_lengths: list[int],
    response_lengths: list[int],
    epochs: int,
    shared_trunk: bool = False,
    critic: bool = True,
) -> dict[str, int]:
    """FLOPs per phase of one PPO iteration over a batch of episodes.

    ``policy`` is the shape of actor and reference, ``value`` of critic and reward model.
    ``shared_trunk``: the critic is a value head on the actor's trunk (``critic.shared_trunk``):
    its values cost a policy-trunk forward, and the update trains one trunk with both heads.
    ``prompt_lengths`` / ``response_lengths``: real tokens per episode (BOS included).
    Phases: generate, logprobs (rollout policy), ref_logprobs, values, reward, update
    (``epochs`` forward + backward passes of actor and critic), and total. ``critic=False``: a
    critic-free algorithm (GRPO): no values and no critic update.
    """
    if len(prompt_lengths) != len(response_lengths):
        raise ValueError("prompt_lengths and response_lengths must have the same length")
    out = dict.fromkeys(("generate", "logprobs", "ref_logprobs", "values", "reward", "update"), 0)
    for p, a in zip(prompt_lengths, response_lengths):
        t = p + a
        out["generate"] += generate(policy, p, a)
        out["logprobs"] += policy_forward(policy, t, a)
        out["ref_logprobs"] += policy_forward(policy, t, a)
        if critic:
            out["values"] += scalar_forward(policy if shared_trunk else value, t, a)
        out["reward"] += scalar_forward(value, t, 1)
        # Forward + backward = 3 forwards' worth of matmuls, for actor and critic, every epoch.
        value_work = 0 if not critic else 2 * policy.hidden * a if shared_trunk else scalar_forward(value, t, a)
        out["update"] += epochs * 3 * (policy_forward(policy, t, a) + value_work)
    out["total"] = sum(out.values())
    return out
