"""Stage 3: PPO-RLHF with four roles (actor, reference, reward, critic).

One iteration (Ziegler et al. 2019; Ouyang et al. 2022; Stiennon et al. 2020):
sample → log-probs under actor and reference → values → score → per-token reward
(−β·KL at every token, score at the last) → GAE → whitened advantages → clipped-surrogate
and clipped-value updates for ``ppo.epochs`` passes of shuffled minibatches → β update.
The loop never imports Ray: roles are plain objects; placement can swap them for remote ones.
See docs/implementation_details.md for each detail and its source.
"""

from __future__ import annotations

import logging
import math
import random
import time
import warnings

import torch

from tether.algos import (
    explained_variance,
    gae_advantages,
    kl_estimate,
    kl_k1,
    kl_k3,
    masked_mean,
    masked_whiten,
    ppo_policy_loss,
    repetition_rate,
    shape_rewards,
    value_loss,
)
from tether.config import PPOConfig
from tether.errors import TrainingError
from tether.loops.common import check_finite, grad_norm_and_clip, make_optimizer, make_scheduler, progress, save_final
from tether.loops.ppo_setup import (
    PromptSet,
    Roles,
    ScoreNormalizer,
    build_roles,
    kl_controller,
    load_prompt_set,
    sampling_params,
)
from tether.metrics import MetricsLogger
from tether.runs import prepare_run_dir, seed_everything, set_threads
from tether.types import Experience, Rollout

log = logging.getLogger(__name__)


class Timer:
    def __init__(self):
        self.times: dict[str, float] = {}

    def __call__(self, name: str):
        timer = self

        class _Span:
            def __enter__(self):
                self.t0 = time.perf_counter()

            def __exit__(self, *exc):
                timer.times[f"timing/{name}"] = timer.times.get(f"timing/{name}", 0.0) + time.perf_counter() - self.t0

        return _Span()


class PPOTrainer:
    """Holds the roles, optimisers and controllers; :meth:`step` is one PPO iteration."""

    def __init__(self, cfg: PPOConfig, roles: Roles, prompts: PromptSet):
        self.cfg = cfg
        self.roles = roles
        self.prompts = prompts
        self.sampling = sampling_params(cfg)
        self.kl_ctl = kl_controller(cfg)
        self.normalize = ScoreNormalizer(cfg.reward.normalize)
        p = cfg.ppo
        steps_per_iter = p.epochs * (cfg.rollout.batch_size // p.minibatch_size)
        total = p.iterations * steps_per_iter
        self.actor_opt = make_optimizer(roles.actor.model, p.actor_lr, p.weight_decay)
        self.critic_opt = make_optimizer(roles.critic.model, cfg.critic.lr, p.weight_decay)
        self.actor_sched = make_scheduler(self.actor_opt, "constant", p.warmup_steps, total, 1.0)
        self.critic_sched = make_scheduler(self.critic_opt, "constant", p.warmup_steps, total, 1.0)
        self.generator = torch.Generator().manual_seed(cfg.run.seed)
        self.prompt_rng = random.Random(cfg.run.seed)
        self.prompt_order: list[int] = []
        self.iteration = 0

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> dict:
        timer = Timer()
        with timer("rollout"):
            ids, texts = self.next_prompts()
            rollout = self.roles.engine.generate(ids, texts, self.sampling)
        experience, stats = self.make_experience(rollout, timer)
        with timer("update"):
            stats.update(self.update(experience))
        self.kl_ctl.update(stats["objective/kl"], self.cfg.rollout.batch_size)
        self.iteration += 1
        stats.update(timer.times)
        stats["timing/iteration"] = sum(timer.times.values())
        tokens = float(rollout.response_mask.sum())
        stats["perf/generated_tokens_per_s"] = tokens / max(timer.times["timing/rollout"], 1e-9)
        return stats

    def next_prompts(self) -> tuple[list[list[int]], list[str]]:
        """The next ``rollout.batch_size`` prompts of a shuffled cycle over the prompt set."""
        chosen = []
        while len(chosen) < self.cfg.rollout.batch_size:
            if not self.prompt_order:
                self.prompt_order = list(range(len(self.prompts.ids)))
                self.prompt_rng.shuffle(self.prompt_order)
            chosen.append(self.prompt_order.pop())
        return [self.prompts.ids[i] for i in chosen], [self.prompts.texts[i] for i in chosen]

    @torch.no_grad()
    def make_experience(self, rollout: Rollout, timer: Timer) -> tuple[Experience, dict]:
        cfg, roles, mask = self.cfg, self.roles, rollout.response_mask
        with timer("logprobs"):
            logp, entropy = roles.actor.logprobs(rollout, with_entropy=True)
        with timer("ref_logprobs"):
            ref_logp, _ = roles.reference.logprobs(rollout)
        with timer("values"):
            values = roles.critic.values(rollout)
        with timer("reward"):
            raw = roles.reward.score(rollout).float()
        with timer("advantages"):
            score = self.normalize(raw)
            if cfg.reward.eos_penalty is not None:
                # A response cut at the length cap is not judged: it gets a fixed penalty (N+ study).
                score = torch.where(rollout.ended, score, torch.full_like(score, cfg.reward.eos_penalty))
            if cfg.reward.clip is not None:
                score = score.clamp(-cfg.reward.clip, cfg.reward.clip)
            kl_train = kl_estimate(logp, ref_logp, cfg.kl.estimator)
            beta = self.kl_ctl.value if cfg.kl.placement == "reward" else 0.0
            rewards, non_score = shape_rewards(score, kl_train, beta, mask)
            advantages, returns = gae_advantages(rewards, values, mask, cfg.ppo.gamma, cfg.ppo.lam)
            if cfg.ppo.whiten_advantages:
                advantages = masked_whiten(advantages, mask)
        k3 = kl_k3(logp, ref_logp)
        self.check_invariant(
            float(torch.where(mask.bool(), k3, torch.zeros_like(k3)).min()) >= -1e-5,
            "k3 KL estimate is negative: log-probs are not finite or not log-probabilities.",
        )
        exp = Experience(rollout, logp, ref_logp, values, score, rewards, advantages, returns)
        lengths = mask.sum(1).float()
        stats = {
            "objective/score": float(score.mean()),
            "objective/score_raw": float(raw.mean()),
            "objective/kl": float((kl_k1(logp, ref_logp) * mask).sum(1).mean()),
            "objective/kl_k3": float((k3 * mask).sum(1).mean()),
            "objective/kl_coef": self.kl_ctl.value,
            "objective/entropy": float(masked_mean(entropy, mask)),
            "objective/non_score_reward": float(non_score.sum(1).mean()),
            "response/length_mean": float(lengths.mean()),
            "response/eos_rate": float(rollout.ended.float().mean()),
            "response/repetition": sum(repetition_rate(r.split(), 2) for r in rollout.responses) / len(rollout.responses),
            "ppo/returns_mean": float(masked_mean(returns, mask)),
            "ppo/val/explained_var": explained_variance(values, returns, mask),
        }
        return exp, stats

    def update(self, exp: Experience) -> dict:
        """``ppo.epochs`` passes of shuffled minibatches; actor and critic step together."""
        p, cfg = self.cfg.ppo, self.cfg
        actor_on = self.iteration >= p.critic_warmup_iters
        batch = exp.rollout.response_ids.shape[0]
        sums: dict[str, float] = {}
        n_mb, early_stop = 0, False
        for epoch in range(p.epochs):
            order = torch.randperm(batch, generator=self.generator)
            for mb_index in order.split(p.minibatch_size):
                first = epoch == 0 and n_mb == 0
                stats = self.minibatch_step(exp, mb_index, actor_on, check_ratio=first)
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + v
                n_mb += 1
            if p.target_approx_kl is not None and sums["ppo/policy/approxkl"] / n_mb > p.target_approx_kl:
                early_stop = True  # Stop the epochs early: the policy left the trust region.
                break
        out = {k: v / max(n_mb, 1) for k, v in sums.items()}
        out.update({"ppo/early_stop": float(early_stop), "ppo/minibatches": n_mb,
                    "optim/lr": self.actor_sched.get_last_lr()[0], "ppo/actor_trained": float(actor_on)})
        return out

    def minibatch_step(self, exp: Experience, mb_index: torch.Tensor, actor_on: bool, check_ratio: bool) -> dict:
        p, cfg = self.cfg.ppo, self.cfg
        where = f"iteration {self.iteration + 1}"
        n_tokens = float(exp.rollout.response_mask[mb_index].sum())
        stats: dict[str, float] = {}
        for micro in mb_index.split(p.minibatch_size // p.grad_accum_steps):
            mb = exp.select(micro)
            mask = mb.rollout.response_mask
            weight = float(mask.sum()) / n_tokens  # token-level mean over the whole minibatch
            if actor_on:
                logp, entropy = self.roles.actor.forward(mb.rollout, with_entropy=p.entropy_coef > 0)
                pl = ppo_policy_loss(logp, mb.logprobs, mb.advantages, mask, p.clip)
                loss = pl.loss
                if p.entropy_coef > 0:
                    loss = loss - p.entropy_coef * masked_mean(entropy, mask)
                if cfg.kl.placement == "loss":
                    kl = kl_estimate(logp, mb.ref_logprobs, cfg.kl.estimator)
                    loss = loss + self.kl_ctl.value * masked_mean(kl, mask)
                check_finite("policy loss", loss, where)
                (loss * weight).backward()
                if check_ratio:
                    self.check_ratio(logp.detach(), mb.logprobs, mask)
                for k, v in (("loss", float(pl.loss)), ("clipfrac", pl.clipfrac), ("approxkl", pl.approx_kl), ("ratio_mean", pl.ratio_mean)):
                    stats[f"ppo/policy/{k}"] = stats.get(f"ppo/policy/{k}", 0.0) + v * weight
            values = self.roles.critic.forward(mb.rollout)
            vl = value_loss(values, mb.values, mb.returns, mask, p.value_clip)
            check_finite("value loss", vl.loss, where)
            (p.vf_coef * vl.loss * weight).backward()
            stats["ppo/val/loss"] = stats.get("ppo/val/loss", 0.0) + float(vl.loss) * weight
            stats["ppo/val/clipfrac"] = stats.get("ppo/val/clipfrac", 0.0) + vl.clipfrac * weight
        if actor_on:
            stats["optim/grad_norm"] = grad_norm_and_clip(self.roles.actor.model, p.max_grad_norm, where + " (actor)")
            self.actor_opt.step()
            self.actor_sched.step()
        stats["optim/critic_grad_norm"] = grad_norm_and_clip(self.roles.critic.model, p.max_grad_norm, where + " (critic)")
        self.critic_opt.step()
        self.critic_sched.step()
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        if not actor_on:
            stats.update({"ppo/policy/loss": 0.0, "ppo/policy/clipfrac": 0.0, "ppo/policy/approxkl": 0.0, "ppo/policy/ratio_mean": 1.0})
        return stats

    # -- invariants -------------------------------------------------------------------------
    def check_ratio(self, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> None:
        """Before any update the new and rollout policies are the same model: ratio must be 1."""
        dev = torch.where(mask.bool(), (logp - old_logp).exp() - 1, torch.zeros_like(logp)).abs().max()
        self.last_ratio_deviation = float(dev)
        self.check_invariant(
            float(dev) <= self.cfg.ppo.ratio_tolerance,
            f"policy ratio on the first minibatch deviates from 1 by {float(dev):.2e} "
            f"(tolerance {self.cfg.ppo.ratio_tolerance:g}): dropout is on, or the log-probs "
            "use a different temperature or positions than sampling.",
        )

    def check_invariant(self, ok: bool, message: str) -> None:
        if ok:
            return
        text = f"Invariant broken at iteration {self.iteration + 1}: {message}"
        if self.cfg.ppo.on_invariant == "error":
            raise TrainingError(text)
        warnings.warn(text, stacklevel=2)


def run_ppo(cfg: PPOConfig, on_iteration=None) -> dict:
    """Run PPO; save the final policy at ``run.out`` (critic in ``run.out/critic``)."""
    set_threads(cfg.run.threads)
    seed_everything(cfg.run.seed)
    out = prepare_run_dir(cfg.run.out, cfg, "ppo", cfg.run.overwrite)
    roles = build_roles(cfg)
    prompts = load_prompt_set(cfg.prompts, cfg.prompts_split, roles.tokenizer, cfg.model.chat_template, cfg.rollout.max_prompt_length)
    trainer = PPOTrainer(cfg, roles, prompts)
    logger = MetricsLogger(out, "ppo")
    logger.log(0, {"data/prompts": len(prompts.ids), "data/dropped_long": prompts.dropped_long})
    bar = progress(cfg.ppo.iterations, "ppo", cfg.run.progress)
    history = []
    t0 = time.perf_counter()
    for it in range(1, cfg.ppo.iterations + 1):
        stats = trainer.step()
        history.append(stats)
        if it % cfg.run.log_every == 0 or it == 1 or it == cfg.ppo.iterations:
            pass
        logger.log(it, stats)
        bar.update(1)
        bar.set_postfix(score=f"{stats['objective/score']:.2f}", kl=f"{stats['objective/kl']:.2f}", beta=f"{stats['objective/kl_coef']:.3f}")
        if on_iteration is not None:
            on_iteration(it, stats, trainer)
    bar.close()
    logger.close()
    save_final(out, roles.actor.model, roles.tokenizer, {"stage": "ppo", "iterations": cfg.ppo.iterations})
    save_final(out / "critic", roles.critic.model, roles.tokenizer, {"stage": "ppo-critic"})
    return {"history": history, "trainer": trainer, "time_s": time.perf_counter() - t0}
