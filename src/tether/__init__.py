"""tether: PPO-based RLHF (SFT → Bradley-Terry reward model → PPO) that runs on a laptop CPU.

The stages as Python functions (each takes a config object, a dict or a YAML path and returns a
:class:`RunResult`; see :mod:`tether.api`)::

    import tether
    sft = tether.sft({"model.name_or_path": "Qwen/Qwen2.5-0.5B", "data.train": "demos.jsonl", "run.out": "runs/sft"})

Every registered RL algorithm is a function of the same name (``tether.ppo``, ``tether.grpo``, a
plugin's: :mod:`tether.registry.algorithms`), and so is every supervised stage
(:mod:`tether.registry.stages`); ``tether.run(stage, ...)`` runs any stage by name.
"""

__version__ = "0.1.0"

import tether.api as _api  # noqa: E402
from tether.common.errors import ConfigError, DataError, ModelError, TetherError, TrainingError  # noqa: E402
from tether.registry.algorithms import ALGORITHMS as _ALGORITHMS  # noqa: E402
from tether.registry.stages import STAGES as _STAGES  # noqa: E402

# Not ``from tether.api import ...``: that form asks the module for ``__path__``, which its
# module ``__getattr__`` answers by loading the plugins, so a broken plugin would break
# ``import tether`` itself. Plugins load on first use of the registry, where the error is reported.
RunResult, dry_run, run = _api.RunResult, _api.dry_run, _api.run


def __getattr__(name: str):
    """``tether.NAME`` for every registered stage (its API function: ``tether.sft``, ``tether.ppo``, a plugin's)."""
    if name.startswith("__") and name.endswith("__"):
        # Tools probe dunders (``__wrapped__``, ``__path__``): no algorithm is named so, and
        # answering must not load the plugins.
        raise AttributeError(f"module 'tether' has no attribute {name!r}")
    try:
        return getattr(_api, name)
    except AttributeError:
        raise AttributeError(f"module 'tether' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *(spec.api for spec in _STAGES.values()), *_ALGORITHMS})


__all__ = ["ConfigError", "DataError", "ModelError", "RunResult", "TetherError", "TrainingError", "__version__",
           "dry_run", "run", *(spec.api for spec in _STAGES.values()), *_ALGORITHMS]
