"""Stage 3: PPO-RLHF with four roles (actor, reference, reward source, critic).

The RL loop is :mod:`tether.loops.rl` (one iteration) and :mod:`tether.loops.rl_run` (the run
around it); PPO itself is :class:`tether.algorithms.ppo.PPO`: per-token −β·KL plus the score at
the last token, GAE, the clipped surrogate and the clipped value loss.
"""

from __future__ import annotations

from tether.algorithms.ppo import PPO
from tether.config import PPOConfig
from tether.loops.rl import RLTrainer
from tether.loops.rl_run import run_rl
from tether.runs import guarded_run

PPOTrainer = RLTrainer  # the PPO trainer is the RL trainer with the PPO algorithm


@guarded_run
def run_ppo(cfg: PPOConfig, on_iteration=None, resume: bool = False) -> dict:
    """Run PPO; save the final policy at ``run.out`` (critic in ``run.out/critic``).

    ``resume``: continue from the newest complete checkpoint in ``run.out`` (if any).
    ``on_iteration(iteration, stats, trainer)`` is called after every iteration.
    """
    return run_rl(cfg, PPO(cfg), "ppo", on_iteration, resume)


def ppo_trainer(cfg: PPOConfig, roles, prompts) -> RLTrainer:
    """A PPO trainer over roles built in memory (:func:`tether.roles.build.make_roles`), placed in
    this process (or, under torchrun, on every rank): what the benchmark and the tests drive
    iteration by iteration."""
    from tether.placement import place_roles

    return RLTrainer(cfg, place_roles(cfg, roles), prompts, PPO(cfg))
