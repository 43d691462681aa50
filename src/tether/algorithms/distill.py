"""On-policy distillation (Agarwal et al. 2024, GKD; Gu et al. 2024, MiniLLM): the student samples
responses, a frozen teacher — the reference role, in process (``reference``) or behind an endpoint
(``distill.teacher_url``) — gives the log-probability of every sampled token, and each token's
advantage is how much more the teacher likes it than the student does (``distill.divergence``:
log T − log S for the reverse KL, the generalised JSD's form otherwise;
:mod:`tether.algos.distill`). No reward and no critic: the student is trained with the clipped
surrogate the critic-free algorithms share, without a KL term (the KL to the reference is the
objective itself). Teacher and student may differ in size but read the same token ids (the
roles' tokenizer check, and the endpoint's own)."""

from __future__ import annotations

from dataclasses import replace

from tether.algorithms.clipped import CriticFree
from tether.algos import masked_mean
from tether.algos.distill import distill_advantages, token_divergence
from tether.types import Experience, Rollout


class OnPolicyDistillation(CriticFree):
    def experience(self, rollout: Rollout, logprobs, ref_logprobs, values, scores, kl_coef: float):
        """``logprobs``: the student's (B, A) π_old of its sampled tokens; ``ref_logprobs``: the teacher's."""
        d = self.cfg.distill
        mask = rollout.loss_mask.to(logprobs.device)
        teacher = ref_logprobs.to(logprobs)
        advantages = distill_advantages(logprobs, teacher, mask, d.divergence, d.beta, d.discount)
        m = mask.bool()
        reverse = token_divergence(logprobs, teacher, "reverse_kl")
        stats = {"distill/reverse_kl": float(masked_mean(reverse, m)),  # per token, KL(student || teacher)
                 "distill/divergence": float(masked_mean(token_divergence(logprobs, teacher, d.divergence, d.beta), m)),
                 "distill/teacher_logprob": float(masked_mean(teacher, m)),
                 "ppo/advantages_mean": float(masked_mean(advantages, m))}
        return Experience(rollout, logprobs, ref_logprobs, None, scores, advantages, advantages, advantages), stats

    def actor_loss(self, kl_coef: float):
        # No KL term: the distance to the reference (the teacher) is what the advantage already lowers.
        return replace(super().actor_loss(kl_coef), kl_in_loss=False)
