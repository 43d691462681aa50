"""RL algorithms on the same roles: an advantage estimator plus losses (:class:`Algorithm`).

Chosen by name from :data:`ALGORITHMS`; each lives in one file.
"""

from __future__ import annotations

import importlib

from tether.algorithms.base import Algorithm, Loss

ALGORITHMS = {"ppo": "tether.algorithms.ppo:PPO", "grpo": "tether.algorithms.grpo:GRPO",
              "rloo": "tether.algorithms.rloo:RLOO", "reinforce_pp": "tether.algorithms.reinforce_pp:ReinforcePP"}


def algorithm(name: str, cfg) -> Algorithm:
    module, attr = ALGORITHMS[name].split(":")
    return getattr(importlib.import_module(module), attr)(cfg)


__all__ = ["ALGORITHMS", "Algorithm", "Loss", "algorithm"]
