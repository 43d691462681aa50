"""RL from a reward with four roles: actor, reference, reward source and (for PPO) critic.

One iteration (Ziegler et al. 2019; Ouyang et al. 2022; Stiennon et al. 2020): sample →
log-probs under actor and reference → values → score → the algorithm's advantages →
``rl.epochs`` passes of shuffled minibatches through the roles' updates → KL-controller update.

The loop owns control only. Every piece of compute is a role call through a placement
(:mod:`tether.placement`): the loop holds role proxies, never a model, and never imports Ray or
the CPU speedups; what makes the algorithm PPO (or another one) is :mod:`tether.algorithms`.
See docs/architecture.md for an iteration traced file by file.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings

import torch

from tether.algorithms.checks import experience_of
from tether.registry.algorithms import algorithm_spec
from tether.algos import kl_k1, kl_k3, masked_mean, repetition_rate, sampled_entropy_estimate
from tether.algos.off_policy import is_stats, is_weights, nonfinite_tokens
from tether.common.errors import TrainingError
from tether.loops.common import Timer
from tether.loops.micro_batches import minibatch_order, split_by_token_budget
from tether.loops.minibatch_stats import average_steps, mean_of, merge_role_steps
from tether.loops.rollout_pipeline import RolloutPipeline, sampled_stats
from tether.loops.reward_objectives import RewardObjectives
from tether.loops.rl_setup import (PromptSet, ScoreNormalizer, iteration_seed, kl_controller, prompt_indices,
                                   reads_dense_rewards, sampling_params, score_rollout, shape_scores,
                                   with_episode_rewards, without_truncated)
from tether.registry.engines import pi_old_captured
from tether.rollout import SamplingParams, engine_settings_block, engine_spec
from tether.rollout.episode_metrics import episode_metrics
from tether.placement import role
from tether.common.runtime import rank_seed
from tether.types import Experience, Rollout


class RLTrainer:
    """Holds the role proxies, the KL controller and the score normaliser; :meth:`step` is one iteration."""

    def __init__(self, cfg, placement, prompts: PromptSet, algorithm):
        self.cfg, self.placement, self.prompts, self.algo = cfg, placement, prompts, algorithm
        spec = algorithm_spec(cfg.algorithm)
        self.actor, self.reference, self.rollout = (role(placement, name) for name in ("actor", "reference", "rollout"))
        self.reward = role(placement, "reward") if spec.needs_reward else None  # distill: the teacher is the signal
        self.critic = role(placement, "critic") if cfg.needs_critic else None
        self.whole_groups = spec.whole_groups  # the update shuffles whole groups
        # A shared-trunk critic trains inside the actor's update: nothing to run beside it.
        self.critic_trains = self.critic is not None and self.critic.trains_alone()
        self.sampling = sampling_params(cfg)
        self.kl_ctl = kl_controller(cfg)
        self.normalize = ScoreNormalizer(cfg.reward.normalize)
        self.objectives = RewardObjectives(cfg.reward.terms)  # weights, per-term normalisers, constraints
        self.iteration = 0
        self.last_ratio_deviation = self.last_sync_diff = float("nan")
        self.last_experience, self.last_version = None, None  # and the weights version that sampled it (async)
        self.rollout_engine = engine_spec(cfg.rollout.engine)  # what the generation engine declares
        self.pi_old_captured = pi_old_captured(cfg.rollout)  # pi_old is the engine's: no scoring pass
        # rollout.max_staleness >= 1: a worker with its own weights samples ahead (the "sampler" role).
        self.pipeline = RolloutPipeline(
            role(placement, "sampler"), cfg.rollout.max_staleness, self.next_prompts,
            lambda i: iteration_seed(cfg.run.seed, i), self.sampling,
            rows_of=None if prompts.rows is None else self.prompt_rows) if cfg.rollout.max_staleness else None
        if self.pipeline is not None:
            self.pipeline.push(self.iteration)  # the sampler's first weights: the actor's now
        elif self.rollout_engine.holds_own_weights:
            self.sync_weights(Timer())  # the engine starts from the checkpoint on disk: give it the actor's

    # -- one iteration -------------------------------------------------------------------
    def step(self) -> dict:
        # Every random draw of iteration i derives from (seed, i): resuming needs no RNG replay.
        torch.manual_seed(iteration_seed(self.cfg.run.seed, self.iteration))
        timer, t0 = Timer(), time.perf_counter()
        with timer("rollout"):
            rollout, sampled = self.sample()
        experience, stats = self.make_experience(rollout, timer)
        stats.update(sampled)
        with timer("update"):
            stats.update(self.update(experience))
        self.sync_weights(timer)
        self.kl_ctl.update(stats["objective/kl"], len(rollout))
        self.iteration += 1
        self.last_experience = experience
        stats.update(timer.times)
        stats["timing/iteration"] = time.perf_counter() - t0
        if not math.isnan(self.last_sync_diff):  # checked (the engine block's check_sync)
            stats["rollout/sync_logprob_diff"] = self.last_sync_diff
        sampling_s = stats.get("timing/engine_generate", timer.times["timing/rollout"])
        stats["perf/generated_tokens_per_s"] = float(rollout.loss_mask.sum()) / max(sampling_s, 1e-9)  # sampled ones
        return stats

    def sample(self) -> tuple[Rollout, dict]:
        """This iteration's rollout, sampled now; or, with ``rollout.max_staleness`` >= 1, the one the
        sampling worker sampled ahead, with its staleness and the waits on either side."""
        if self.pipeline is None:
            ids, texts = self.next_prompts()
            episodes = {} if self.prompts.rows is None else {"rows": self.prompt_rows()}
            return self.rollout.generate(ids, texts, self.sampling, **episodes), {}
        t0 = time.perf_counter()
        got = self.pipeline.take(self.iteration)
        self.last_version = got.version
        return got.rollout, sampled_stats(self.iteration, got, waited=time.perf_counter() - t0)

    def next_prompts(self, iteration: int | None = None) -> tuple[list[list[int]], list[str]]:
        """Iteration ``iteration``'s (default: this one's) slice of an endless sequence of shuffled
        passes over the prompts, each repeated ``samples_per_prompt`` times (a group's rows are consecutive)."""
        idx = self.prompt_order(iteration)
        return [self.prompts.ids[i] for i in idx], [self.prompts.texts[i] for i in idx]

    def prompt_rows(self, iteration: int | None = None) -> list[dict]:
        """The prompt rows of :meth:`next_prompts`' prompts: what an environment starts episodes from."""
        return [self.prompts.rows[i] for i in self.prompt_order(iteration)]

    def prompt_order(self, iteration: int | None = None) -> list[int]:
        iteration = self.iteration if iteration is None else iteration
        idx = prompt_indices(len(self.prompts.ids), self.cfg.rollout.batch_size, iteration, self.cfg.run.seed)
        return [i for i in idx for _ in range(self.algo.samples_per_prompt)]

    @torch.no_grad()
    def make_experience(self, rollout: Rollout, timer: Timer) -> tuple[Experience, dict]:
        with timer("logprobs"):
            logp, entropy = self.actor.logprobs(rollout, with_entropy=True)
            if entropy is None:  # the engine's log-probs came without entropies (vLLM)
                entropy = sampled_entropy_estimate(logp)
        with timer("ref_logprobs"):
            ref_logp, _ = self.reference.logprobs(rollout)
        with timer("values"):
            values = self.critic.values(rollout) if self.critic is not None else None
        with timer("reward"):
            raw, term_stats, rollout = score_rollout(self.reward, rollout, self.cfg, logp.device, self.objectives)
        with timer("advantages"):
            score = raw if self.reward is None else with_episode_rewards(
                shape_scores(raw, rollout.ended, self.normalize, self.cfg), rollout, reads_dense_rewards(self.cfg))
            exp, algo_stats = experience_of(self.algo, self.cfg.algorithm, rollout, logp, ref_logp, values, score,
                                            self.kl_ctl.value)  # its answer checked: (B, A) fields, a stats dict
        # The tokens the policy sampled: an episode's observation tokens have no KL, entropy or weight.
        mask = exp.rollout.loss_mask.to(logp.device)
        if self.cfg.rollout.is_correction != "none":  # the engine's distribution against the actor's pi_old
            if rollout.sampled_logprobs is None:
                raise TrainingError(f"rollout.is_correction={self.cfg.rollout.is_correction}: the "
                                    f"{self.cfg.rollout.engine} engine returned no sampling log-probs.")
            behaviour = rollout.sampled_logprobs.to(logp.device)
            weights, over = is_weights(logp, behaviour, mask, self.cfg.rollout.is_correction, self.cfg.rollout.is_cap)
            exp = dataclasses.replace(exp, is_weights=weights)
            algo_stats = {**algo_stats, **is_stats(weights, over, mask, nonfinite_tokens(logp, behaviour, mask))}
        k3 = kl_k3(logp, ref_logp)
        self.check_invariant(
            float(torch.where(mask.bool(), k3, torch.zeros_like(k3)).min()) >= -1e-5,
            "k3 KL estimate is negative: log-probs are not finite or not log-probabilities.",
        )
        stats = {
            "objective/score": float(score.mean()),
            "objective/score_raw": float(raw.mean()),
            "objective/score_std": float(score.float().std(unbiased=False)),
            "objective/kl": float((kl_k1(logp, ref_logp) * mask).sum(1).mean()),
            "objective/kl_k3": float((k3 * mask).sum(1).mean()),
            "objective/kl_coef": self.kl_ctl.value,
            "objective/entropy": float(masked_mean(entropy, mask)),
            "response/length_mean": float(rollout.lengths.float().mean()),  # every response token
            "response/eos_rate": float(rollout.ended.float().mean()),
            "response/repetition": sum(repetition_rate(r.split(), 2) for r in rollout.responses) / len(rollout.responses),
            **algo_stats, **term_stats,
        }
        if rollout.episodes is not None:  # turns, tool calls and errors, truncation, the engine's tokens
            stats.update(episode_metrics(rollout, self.trainer_logprobs(rollout, logp, timer)))
            exp = without_truncated(exp) if self.cfg.environment.mask_truncated else exp  # they train nothing
        return exp, stats

    def trainer_logprobs(self, rollout: Rollout, logp: torch.Tensor, timer: Timer) -> torch.Tensor | None:
        """The trainer's log-probs for the token check of episodes (docs/episodes.md): ``logp``, or a
        forward of its own when ``logp`` is the engine's; None for a stale rollout (or no engine's)."""
        if rollout.sampled_logprobs is None or (self.pipeline is not None and self.last_version != self.iteration):
            return None
        if not self.pi_old_captured:
            return logp
        with timer("token_check"):
            return self.actor.logprobs(rollout, use_captured=False)[0]

    def update(self, exp: Experience) -> dict:
        """``rl.epochs`` passes of shuffled minibatches; each epoch's actor and critic updates are
        submitted together (the placement decides whether they overlap)."""
        p, cfg = self.cfg.rl, self.cfg
        actor_on = self.iteration >= cfg.ppo.critic_warmup_iters
        # The minibatch order is the same on every rank (rank 0's seed): each trains on its slice of each.
        generator = torch.Generator().manual_seed(rank_seed(cfg.run.seed, self.iteration, 0) + 1)
        where = f"iteration {self.iteration + 1}"
        actor_loss, critic_loss = self.algo.actor_loss(self.kl_ctl.value), self.algo.critic_loss()
        steps: list[dict] = []
        early_stop = False
        # rl.micro_batch_tokens: each minibatch binned by its rows' real tokens (prompt + response).
        tokens = None if p.micro_batch_tokens is None else exp.rollout.attention_mask.sum(1).tolist()
        for epoch in range(p.epochs):
            order = minibatch_order(len(exp), self.algo.samples_per_prompt if self.whole_groups else 1, generator)
            if tokens is None:
                minibatches = [mb.split(p.minibatch_size // p.grad_accum_steps) for mb in order.split(p.minibatch_size)]
            else:
                minibatches = [split_by_token_budget(mb, tokens, p.micro_batch_tokens, not cfg.model.padding_free)
                               for mb in order.split(p.minibatch_size)]
            calls = [self.critic.submit.update(exp, minibatches, critic_loss, where)] if self.critic_trains else []
            if actor_on:
                calls.append(self.actor.submit.update(exp, minibatches, actor_loss, where))
            epoch_steps = merge_role_steps(self.placement.wait(calls), len(minibatches), actor_on)
            if epoch == 0 and actor_on:
                self.check_ratio(epoch_steps[0]["check/ratio_deviation"])
            steps += epoch_steps
            if p.target_approx_kl is not None and mean_of(steps, "ppo/policy/approxkl") > p.target_approx_kl:
                early_stop = True  # Stop the epochs early: the policy left the trust region.
                break
        out = average_steps(steps)
        out.update({"ppo/early_stop": float(early_stop), "ppo/minibatches": len(steps),
                    "optim/lr": self.actor.last_lr(), "ppo/actor_trained": float(actor_on)})
        if actor_on and cfg.rollout.use_engine_logprobs:  # how far the engine's pi_old is from the actor's
            out["rollout/engine_ratio_deviation"] = self.last_ratio_deviation
        return out

    def sync_weights(self, timer: Timer) -> None:
        """Load the actor's new weights into a generation engine that holds its own copy (where
        the engine runs: it pulls them from the actor), and check them when its settings ask; with a
        sampling worker, send them to it tagged with their version (the updates behind them)."""
        if self.pipeline is not None:  # the sampler loads them in its turn (an engine of its own included)
            with timer("weight_sync"):
                self.pipeline.push(self.iteration + 1)
        elif self.rollout_engine.holds_own_weights:
            with timer("weight_sync"):
                self.rollout.sync_weights()
            block = engine_settings_block(self.cfg)
            if self.rollout_engine.post_sync_check and block.check_sync:
                self.check_sync(block.sync_tolerance)

    def check_sync(self, tolerance: float) -> float:
        """Sample a few tokens after a sync; the engine's log-probs must be the actor's (within
        ``tolerance``, the engine block's ``sync_tolerance``)."""
        n = min(4, len(self.prompts.ids))
        params = SamplingParams(max_new_tokens=8, temperature=self.cfg.rollout.temperature)
        ro = self.rollout.generate(self.prompts.ids[:n], self.prompts.texts[:n], params,
                                   seed=self.cfg.run.seed + self.iteration, logprobs=True)
        logp, _ = self.actor.logprobs(ro, use_captured=False)
        mask = ro.loss_mask.to(logp.device).bool()
        diff = float((logp - ro.sampled_logprobs.to(logp.device)).abs().masked_fill(~mask, 0).max())
        self.last_sync_diff = diff
        spec = self.rollout_engine
        self.check_invariant(diff <= tolerance,
                             f"after the weight sync the {spec.title} engine's log-probs differ from the actor's by "
                             f"{diff:.2e} ({spec.config_block}.sync_tolerance {tolerance:g}): the engine does not hold "
                             "the actor's weights, and PPO would train off-policy.")
        return diff

    def update_streams(self) -> int:
        """Role updates that run side by side: 2 with a separate critic on a parallel placement."""
        return 2 if self.critic_trains and getattr(self.placement, "parallel", lambda: False)() else 1

    # -- resume ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        state = {"iteration": self.iteration, "actor": self.actor.state_dict(), "kl_ctl": self.kl_ctl.state_dict(),
                 "normalize": self.normalize.state_dict()}
        if not self.objectives.plain:  # running term normalisers, constraint multipliers
            state["objectives"] = self.objectives.state_dict()
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
        if self.pipeline is not None:  # the rollouts sampled ahead: a resumed run trains on these
            state["rollouts"] = self.pipeline.state_dict(self.iteration)
        return state

    def load_state_dict(self, state: dict) -> None:
        self.iteration = state["iteration"]
        self.actor.load_state_dict(state["actor"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
        self.kl_ctl.load_state_dict(state["kl_ctl"])
        self.normalize.load_state_dict(state["normalize"])
        if not self.objectives.plain:
            self.objectives.load_state_dict(state.get("objectives", {}))
        if self.pipeline is not None:
            self.pipeline.load_state_dict(state.get("rollouts", {"next": self.iteration, "rollouts": []}))
            self.pipeline.push(self.iteration)  # the worker samples from the resumed weights on

    # -- invariants -------------------------------------------------------------------------
    def check_ratio(self, deviation: float) -> None:
        """Before any update the new and rollout policies are the same model: ratio must be 1."""
        self.last_ratio_deviation = deviation
        tolerance = self.cfg.ratio_tolerance
        self.check_invariant(
            deviation <= tolerance,
            f"policy ratio on the first minibatch deviates from 1 by {deviation:.2e} "
            f"(tolerance {tolerance:g}): dropout is on, or the log-probs "
            "use a different temperature or positions than sampling.",
        )

    def check_invariant(self, ok: bool, message: str) -> None:
        if ok:
            return
        text = f"Invariant broken at iteration {self.iteration + 1}: {message}"
        if self.cfg.rl.on_invariant == "error":
            raise TrainingError(text)
        warnings.warn(text, stacklevel=2)
