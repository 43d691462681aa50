"""Stage 3: PPO-RLHF with four roles (actor, reference, reward, critic).

One iteration (Ziegler et al. 2019; Ouyang et al. 2022; Stiennon et al. 2020):
sample → log-probs under actor and reference → values → score → per-token reward
(−β·KL at every token, score at the last) → GAE → whitened advantages → clipped-surrogate
and clipped-value updates for ``ppo.epochs`` passes of shuffled minibatches → β update.
The loop never imports Ray: roles are plain objects; placement can swap them for remote ones.
See docs/implementation_details.md for each detail and its source.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
import warnings
from dataclasses import dataclass
from functools import partial

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
from tether.loops.common import (
    NonFiniteGuard,
    Timer,
    announce_resume,
    begin_run,
    grad_norm,
    make_optimizer,
    make_scheduler,
    progress,
    save_final,
)
from tether.loops.ppo_setup import (
    PromptSet,
    Roles,
    ScoreNormalizer,
    build_evaluator,
    build_roles,
    iteration_seed,
    kl_controller,
    load_prompt_set,
    prompt_indices,
    prompt_limit,
    sampling_params,
)
from tether.checkpoint import (
    load_trainer_state,
    save_checkpoint,
    set_rng_state,
    truncate_jsonl,
    truncate_metrics,
)
from tether.eval.health import HealthMonitor, append_alarms
from tether.models.linear_backend import WeightGradWork
from tether.placement.threads import RoleThreads
from tether.metrics import JsonlWriter, MetricsLogger
from tether.runs import guarded_run, prepare_run_dir
from tether.types import Experience, Rollout

log = logging.getLogger(__name__)


def tqdm_write(text: str) -> None:
    """Print above the progress bar."""
    from tqdm.auto import tqdm

    tqdm.write(text, file=sys.stderr)


@dataclass
class RolePass:
    """One role's forward/backward passes over a minibatch's micro-batches (run in its own thread)."""

    stats: dict
    losses: list[torch.Tensor]  # detached, one per micro-batch done; stops at the first non-finite
    grad_norm: float | None  # None when a loss was not finite (no clipping done)


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
        self.actor_opt = make_optimizer(roles.actor.model, p.actor_lr, p.weight_decay, fused=p.fused_optimizer)
        self.critic_opt = make_optimizer(roles.critic.model, cfg.critic.lr, p.weight_decay, fused=p.fused_optimizer)
        self.actor_sched = make_scheduler(self.actor_opt, "constant", p.warmup_steps, total, 1.0)
        self.critic_sched = make_scheduler(self.critic_opt, "constant", p.warmup_steps, total, 1.0)
        self.iteration = 0
        self.guard = NonFiniteGuard(cfg.run.on_nonfinite)
        self.last_ratio_deviation = float("nan")
        self.update_timer = Timer()
        # The actor's and the critic's update passes side by side on a multi-core CPU.
        on_cpu = next(roles.actor.model.parameters()).device.type == "cpu"
        side_by_side = p.parallel_roles and on_cpu
        if side_by_side and p.compile:
            # Two threads compiling their trunks at once deadlocked in dynamo (bf16, small, session 7).
            log.warning("ppo.compile is on: the actor's and the critic's update passes run one after the "
                        "other (ppo.parallel_roles ignored; torch.compile in two threads at once can deadlock).")
            side_by_side = False
        self.threads = RoleThreads(2 if side_by_side else 1)
        # critic.shared_trunk: the parameters both losses train, for one joint gradient clip.
        shared = getattr(roles.critic, "shared_trunk", False)
        self.shared = torch.nn.ModuleList([roles.actor.model, roles.critic.model]) if shared else None

    def update_streams(self) -> int:
        """Threads that run the update's passes side by side: 2 for separate actor and critic
        under ``ppo.parallel_roles`` on 2+ torch threads, else 1 (a shared trunk is one pass)."""
        return 2 if self.threads.parallel() and self.shared is None else 1

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> dict:
        # Every random draw of iteration i derives from (seed, i): resuming needs no RNG replay.
        torch.manual_seed(iteration_seed(self.cfg.run.seed, self.iteration))
        timer = Timer()
        self.update_timer = Timer()  # spans inside the update; reported, not added to the total
        t0 = time.perf_counter()
        with timer("rollout"):
            ids, texts = self.next_prompts()
            rollout = self.roles.engine.generate(ids, texts, self.sampling)
        experience, stats = self.make_experience(rollout, timer)
        self.last_experience = experience
        with timer("update"):
            stats.update(self.update(experience))
        self.kl_ctl.update(stats["objective/kl"], self.cfg.rollout.batch_size)
        self.iteration += 1
        stats.update(timer.times)
        stats["timing/iteration"] = time.perf_counter() - t0
        stats.update(self.update_timer.times)
        tokens = float(rollout.response_mask.sum())
        stats["perf/generated_tokens_per_s"] = tokens / max(timer.times["timing/rollout"], 1e-9)
        return stats

    def next_prompts(self) -> tuple[list[list[int]], list[str]]:
        """This iteration's slice of an endless sequence of shuffled passes over the prompts."""
        idx = prompt_indices(len(self.prompts.ids), self.cfg.rollout.batch_size, self.iteration, self.cfg.run.seed)
        return [self.prompts.ids[i] for i in idx], [self.prompts.texts[i] for i in idx]

    def state_dict(self) -> dict:
        return {
            "iteration": self.iteration,
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "actor_sched": self.actor_sched.state_dict(),
            "critic_sched": self.critic_sched.state_dict(),
            "kl_ctl": self.kl_ctl.state_dict(),
            "normalize": self.normalize.state_dict(),
            "skipped_steps": self.guard.skipped,
        }

    def load_state_dict(self, state: dict) -> None:
        self.iteration = state["iteration"]
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.actor_sched.load_state_dict(state["actor_sched"])
        self.critic_sched.load_state_dict(state["critic_sched"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.normalize.load_state_dict(state["normalize"])
        self.guard.skipped = state.get("skipped_steps", 0)

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
        generator = torch.Generator().manual_seed(iteration_seed(cfg.run.seed, self.iteration) + 1)
        for epoch in range(p.epochs):
            order = torch.randperm(batch, generator=generator)
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
        """One optimiser step of actor and critic on a minibatch, accumulated over micro-batches.

        The critic's and the actor's passes are independent (separate models, losses and
        gradients): :attr:`threads` runs them side by side when it can. A non-finite loss or
        gradient in either skips both models' step, as one combined backward would.
        """
        p = self.cfg.ppo
        where = f"iteration {self.iteration + 1}"
        n_tokens = float(exp.rollout.response_mask[mb_index].sum())
        micros = [exp.select(m) for m in mb_index.split(p.minibatch_size // p.grad_accum_steps)]
        # Each micro-batch's share of the minibatch's tokens: the loss is a token mean over the minibatch.
        weights = [float(mb.rollout.response_mask.sum()) / n_tokens for mb in micros]
        if self.shared is not None:
            # One trunk pass and one backward serve both losses; gradients clipped together.
            joint = partial(self.shared_trunk_loss, check_ratio=check_ratio)
            passes = self.threads.run([partial(self.role_pass, joint, self.shared, micros, weights)])
            named = [("policy and value loss", passes[0])]
            passes = [passes[0], passes[0]]
        else:
            role_jobs = [(self.critic_loss, self.roles.critic.model)]
            if actor_on:
                role_jobs.append((partial(self.actor_loss, check_ratio=check_ratio), self.roles.actor.model))
            # ppo.balance_roles: the two threads share their weight-gradient products.
            share = p.balance_roles and len(role_jobs) > 1 and len(micros) == 1 and self.update_streams() > 1
            work = WeightGradWork(producers=len(role_jobs)) if share else None
            passes = self.threads.run([partial(self.role_pass, fn, model, micros, weights, work) for fn, model in role_jobs])
            named = [("value loss", passes[0])] + ([("policy loss", passes[1])] if actor_on else [])
        stats: dict[str, float] = {}
        for _, rp in named:
            stats.update(rp.stats)
        finite = self.losses_finite(named, len(micros), where)
        with self.update_timer("update/optimizer"):
            if finite:
                if actor_on:
                    stats["optim/grad_norm"] = passes[1].grad_norm
                stats["optim/critic_grad_norm"] = passes[0].grad_norm
                finite = all(self.guard.ok(f"{k} (gradient)", torch.tensor(v), where)
                             for k, v in stats.items() if k.endswith("grad_norm"))
            if finite:
                self.threads.run([self.actor_opt.step, self.critic_opt.step] if actor_on else [self.critic_opt.step])
            if actor_on:
                self.actor_sched.step()  # the actor's warm-up starts when the actor does
            self.critic_sched.step()
            self.actor_opt.zero_grad(set_to_none=True)
            self.critic_opt.zero_grad(set_to_none=True)
        if not actor_on:
            stats.update({"ppo/policy/loss": 0.0, "ppo/policy/clipfrac": 0.0, "ppo/policy/approxkl": 0.0,
                          "ppo/policy/ratio_mean": 1.0})
        stats["optim/skipped_steps"] = float(self.guard.skipped)
        return stats

    def role_pass(self, loss_fn, model, micros: list[Experience], weights: list[float],
                  work: WeightGradWork | None = None) -> RolePass:
        """Forward and backward of one role over the micro-batches, then its gradient norm (clipped).

        ``work``: weight-gradient products shared with the other role's thread (``ppo.balance_roles``);
        this pass queues its own and, after its backward, computes whichever are left.
        """
        stats: dict[str, float] = {}
        losses = []
        span = self.update_timer
        finite = True
        with work.deferring() if work is not None else contextlib.nullcontext():
            for mb, weight in zip(micros, weights):
                with span("update/forward"):
                    loss = loss_fn(mb, stats, weight)
                losses.append(loss.detach())
                if not bool(torch.isfinite(loss).all()):
                    finite = False
                    break
                with span("update/backward"):
                    (loss * weight).backward()
        if work is not None:
            with span("update/backward"):
                work.finish()
        if not finite:
            return RolePass(stats, losses, None)
        with span("update/optimizer"):
            norm = grad_norm(model, self.cfg.ppo.max_grad_norm)
        return RolePass(stats, losses, norm)

    def losses_finite(self, named: list[tuple[str, RolePass]], n_micro: int, where: str) -> bool:
        """Check the losses micro-batch by micro-batch, value loss first, stopping at the first bad one."""
        for i in range(n_micro):
            for name, rp in named:
                if i < len(rp.losses) and not self.guard.ok(name, rp.losses[i], where):
                    return False
        return True

    def actor_loss(self, mb: Experience, stats: dict, weight: float, check_ratio: bool) -> torch.Tensor:
        """Clipped surrogate (+ entropy bonus, + KL term when kl.placement=loss) on a micro-batch."""
        logp, entropy = self.roles.actor.forward(mb.rollout, with_entropy=self.cfg.ppo.entropy_coef > 0)
        return self.policy_objective(mb, logp, entropy, stats, weight, check_ratio)

    def critic_loss(self, mb: Experience, stats: dict, weight: float) -> torch.Tensor:
        """``vf_coef`` × clipped value loss on a micro-batch."""
        return self.value_objective(mb, self.roles.critic.forward(mb.rollout), stats, weight)

    def shared_trunk_loss(self, mb: Experience, stats: dict, weight: float, check_ratio: bool) -> torch.Tensor:
        """Both losses from one pass of the actor's trunk (``critic.shared_trunk``), summed."""
        logp, entropy, values = self.roles.critic.forward_with_policy(mb.rollout, self.cfg.ppo.entropy_coef > 0)
        policy = self.policy_objective(mb, logp, entropy, stats, weight, check_ratio)
        return policy + self.value_objective(mb, values, stats, weight)

    def policy_objective(self, mb: Experience, logp, entropy, stats: dict, weight: float,
                         check_ratio: bool) -> torch.Tensor:
        """The actor's loss from its (B, A) log-probs (and entropies); adds its stats × ``weight``."""
        p, cfg, mask = self.cfg.ppo, self.cfg, mb.rollout.response_mask
        if check_ratio:
            self.check_ratio(logp.detach(), mb.logprobs, mask)
        pl = ppo_policy_loss(logp, mb.logprobs, mb.advantages, mask, p.clip)
        loss = pl.loss
        if p.entropy_coef > 0:
            loss = loss - p.entropy_coef * masked_mean(entropy, mask)
        if cfg.kl.placement == "loss":
            loss = loss + self.kl_ctl.value * masked_mean(kl_estimate(logp, mb.ref_logprobs, cfg.kl.estimator), mask)
        for key, value in (("loss", float(pl.loss.detach())), ("clipfrac", pl.clipfrac),
                           ("approxkl", pl.approx_kl), ("ratio_mean", pl.ratio_mean)):
            stats[f"ppo/policy/{key}"] = stats.get(f"ppo/policy/{key}", 0.0) + value * weight
        return loss

    def value_objective(self, mb: Experience, values, stats: dict, weight: float) -> torch.Tensor:
        """``vf_coef`` × clipped value loss of (B, A) ``values``; adds its stats × ``weight``."""
        p = self.cfg.ppo
        vl = value_loss(values, mb.values, mb.returns, mb.rollout.response_mask, p.value_clip)
        stats["ppo/val/loss"] = stats.get("ppo/val/loss", 0.0) + float(vl.loss.detach()) * weight
        stats["ppo/val/clipfrac"] = stats.get("ppo/val/clipfrac", 0.0) + vl.clipfrac * weight
        return p.vf_coef * vl.loss

    # -- invariants -------------------------------------------------------------------------
    def check_ratio(self, logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> None:
        """Before any update the new and rollout policies are the same model: ratio must be 1."""
        dev = torch.where(mask.bool(), (logp - old_logp).exp() - 1, torch.zeros_like(logp)).abs().max()
        self.last_ratio_deviation = float(dev)
        tolerance = self.cfg.ppo.effective_ratio_tolerance
        self.check_invariant(
            float(dev) <= tolerance,
            f"policy ratio on the first minibatch deviates from 1 by {float(dev):.2e} "
            f"(tolerance {tolerance:g}): dropout is on, or the log-probs "
            "use a different temperature or positions than sampling.",
        )

    def check_invariant(self, ok: bool, message: str) -> None:
        if ok:
            return
        text = f"Invariant broken at iteration {self.iteration + 1}: {message}"
        if self.cfg.ppo.on_invariant == "error":
            raise TrainingError(text)
        warnings.warn(text, stacklevel=2)


SAMPLES_PER_LOG = 4


def sample_rows(iteration: int, exp: Experience, n: int) -> list[dict]:
    """A few (prompt, response, score) rows of a rollout for ``samples.jsonl`` and the report."""
    ro = exp.rollout
    return [
        {"iteration": iteration, "prompt": ro.prompts[i], "response": ro.responses[i],
         "score": float(exp.scores[i]), "ended": bool(ro.ended[i])}
        for i in range(min(n, len(ro.prompts)))
    ]


@guarded_run
def run_ppo(cfg: PPOConfig, on_iteration=None, resume: bool = False) -> dict:
    """Run PPO; save the final policy at ``run.out`` (critic in ``run.out/critic``).

    ``resume``: continue from the newest complete checkpoint in ``run.out`` (if any).
    ``on_iteration(iteration, stats, trainer)`` is called after every iteration.
    """
    ckpt = begin_run(cfg, "ppo", resume)
    roles = build_roles(cfg, ckpt)
    cap = prompt_limit(cfg, roles)
    prompts = load_prompt_set(cfg.prompts, cfg.prompts_split, roles.tokenizer, cfg.model.chat_template, cap)
    evaluator = build_evaluator(cfg, roles, cap)
    out = prepare_run_dir(cfg.run.out, cfg, "ppo", cfg.run.overwrite, resume=ckpt is not None)
    trainer = PPOTrainer(cfg, roles, prompts)
    if ckpt is not None:
        state = load_trainer_state(ckpt)
        trainer.load_state_dict(state["trainer"])
        set_rng_state(state["rng"])
        truncate_metrics(out, trainer.iteration, "ppo")
        truncate_jsonl(out / "samples.jsonl", trainer.iteration)
        truncate_jsonl(out / "alarms.jsonl", trainer.iteration)
    announce_resume(ckpt, trainer.iteration, cfg.ppo.iterations)
    logger = MetricsLogger(out, "ppo")
    if ckpt is None:
        logger.log(0, {"data/prompts": len(prompts.ids), "data/dropped_long": prompts.dropped_long})
    samples = JsonlWriter(out / "samples.jsonl")
    monitor = HealthMonitor(cfg.health, echo=tqdm_write)
    if ckpt is not None:
        monitor.load_state_dict(state["monitor"])
    bar = progress(cfg.ppo.iterations, "ppo", cfg.run.progress)
    bar.update(trainer.iteration)
    history = []
    t0 = time.perf_counter()
    while trainer.iteration < cfg.ppo.iterations:
        stats = trainer.step()
        it = trainer.iteration
        last = it == cfg.ppo.iterations
        if evaluator is not None and (last or (cfg.eval.every and it % cfg.eval.every == 0)):
            t_eval = time.perf_counter()
            stats.update(evaluator(roles.actor.model, roles.tokenizer, roles.reference.model))
            stats["timing/eval"] = time.perf_counter() - t_eval
        history.append(stats)
        append_alarms(out / "alarms.jsonl", monitor.observe(it, stats))
        if it == 1 or last or it % cfg.run.log_every == 0:
            logger.log(it, stats)
            samples.write_many(sample_rows(it, trainer.last_experience, SAMPLES_PER_LOG))
        bar.update(1)
        bar.set_postfix(score=f"{stats['objective/score']:.2f}", kl=f"{stats['objective/kl']:.2f}",
                        beta=f"{stats['objective/kl_coef']:.3f}")
        if on_iteration is not None:
            on_iteration(it, stats, trainer)
        if cfg.run.save_every and it % cfg.run.save_every == 0 and not last:
            models = {"actor": roles.actor.model, "critic": roles.critic.model}
            state = {"trainer": trainer.state_dict(), "monitor": monitor.state_dict()}
            save_checkpoint(out, it, models, roles.tokenizer, state, cfg.run.keep_checkpoints)
        if monitor.should_stop:
            tqdm_write(f"stopping: {monitor.stop_reason}")
            break
    bar.close()
    logger.close()
    save_final(out / "critic", roles.critic.model, roles.tokenizer, {"stage": "ppo-critic"})
    save_final(out, roles.actor.model, roles.tokenizer,
               {"stage": "ppo", "iterations": trainer.iteration, "stopped_by": monitor.stop_reason})
    return {"history": history, "trainer": trainer, "time_s": time.perf_counter() - t0,
            "alarms": [a.to_dict() for a in monitor.alarms], "stopped_by": monitor.stop_reason}
