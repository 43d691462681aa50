"""How a model runs: device, precision, optimiser, schedule, clipping, guard.

:class:`TrainingEngine` owns a trainable model (the actor, the critic, the SFT and RM stages'
model) and :class:`InferenceEngine` a frozen one (the reference, the reward model). Roles say
what a model is for and hand engines loss functions; only engines call ``backward`` and
``step``. CPU-only speedups live in :mod:`tether.engines.cpu`, applied by
:func:`prepare_models` when the device is a CPU.
"""

from tether.engines.inference import AdapterOffEngine, InferenceEngine
from tether.engines.optim import NonFiniteGuard, OptimizerSpec, grad_norm, make_optimizer, make_scheduler
from tether.engines.settings import EngineSettings, Prepared, engine_settings, prepare_models
from tether.engines.training import TrainingEngine

__all__ = [
    "AdapterOffEngine",
    "EngineSettings",
    "InferenceEngine",
    "NonFiniteGuard",
    "OptimizerSpec",
    "Prepared",
    "TrainingEngine",
    "engine_settings",
    "grad_norm",
    "make_optimizer",
    "make_scheduler",
    "prepare_models",
]
