"""Stage 3: PPO-RLHF with four roles (actor, reference, reward source, critic), or a
critic-free algorithm on the same roles (``algorithm``: grpo, rloo, reinforce_pp).

The RL loop is :mod:`tether.loops.rl` (one iteration) and :mod:`tether.loops.rl_run` (the run
around it); PPO itself is :class:`tether.algorithms.ppo.PPO`: per-token −β·KL plus the score at
the last token, GAE, the clipped surrogate and the clipped value loss. The others live beside it
in :mod:`tether.algorithms`.
"""

from __future__ import annotations

from tether.algorithms import algorithm
from tether.config import PPOConfig
from tether.loops.rl import RLTrainer
from tether.loops.rl_run import run_rl
from tether.runs import guarded_run

PPOTrainer = RLTrainer  # the PPO trainer is the RL trainer with the PPO algorithm


@guarded_run
def run_ppo(cfg: PPOConfig, on_iteration=None, resume: bool = False) -> dict:
    """Run ``cfg.algorithm`` (PPO by default); save the final policy at ``run.out`` (PPO's critic
    in ``run.out/critic``). The run directory's stage is the algorithm's name.

    ``resume``: continue from the newest complete checkpoint in ``run.out`` (if any).
    ``on_iteration(iteration, stats, trainer)`` is called after every iteration.
    """
    return run_rl(cfg, algorithm(cfg.algorithm, cfg), cfg.algorithm, on_iteration, resume)


def ppo_trainer(cfg: PPOConfig, roles, prompts) -> RLTrainer:
    """A PPO trainer over roles built in memory (:func:`tether.roles.build.make_roles`), placed in
    this process (or, under torchrun, on every rank): what the benchmark and the tests drive
    iteration by iteration."""
    from tether.placement import place_roles

    return RLTrainer(cfg, place_roles(cfg, roles), prompts, algorithm(cfg.algorithm, cfg))
