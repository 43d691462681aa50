"""RL algorithms on the same roles: an advantage estimator plus losses (:class:`Algorithm`).

Chosen by name from the registry (:mod:`tether.registry.algorithms`); each lives in one file.
"""

from __future__ import annotations

from tether.algorithms.base import Algorithm, Loss
from tether.registry.algorithms import (
    ALGORITHMS,
    DEFAULT_ALGORITHM,
    AlgorithmSpec,
    algorithm_spec,
    build_algorithm,
    register_algorithm,
)


def algorithm(name: str, cfg) -> Algorithm:
    """An instance of the registered algorithm ``name`` for the resolved config ``cfg``."""
    return build_algorithm(name, cfg)


__all__ = ["ALGORITHMS", "DEFAULT_ALGORITHM", "Algorithm", "AlgorithmSpec", "Loss", "algorithm", "algorithm_spec",
           "build_algorithm", "register_algorithm"]
