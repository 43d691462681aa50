"""tether: PPO-based RLHF (SFT → Bradley-Terry reward model → PPO) that runs on a laptop CPU.

The stages as Python functions (each takes a config object, a dict or a YAML path and returns a
:class:`RunResult`; see :mod:`tether.api`)::

    import tether
    sft = tether.sft({"model.name_or_path": "Qwen/Qwen2.5-0.5B", "data.train": "demos.jsonl", "run.out": "runs/sft"})

Every registered RL algorithm is a function of the same name (``tether.ppo``, ``tether.grpo``, a
plugin's: :mod:`tether.algorithms.registry`); ``tether.run(stage, ...)`` runs any stage by name.
"""

__version__ = "0.1.0"

from tether.algorithms.registry import ALGORITHMS as _ALGORITHMS  # noqa: E402
from tether.api import RunResult, dpo, dry_run, kto, orpo, reward_model, run, sft, simpo  # noqa: E402
from tether.errors import ConfigError, DataError, ModelError, TetherError, TrainingError  # noqa: E402


def __getattr__(name: str):
    """``tether.NAME`` for every registered RL algorithm (the API function of ``tether NAME``)."""
    from tether import api

    try:
        return getattr(api, name)
    except AttributeError:
        raise AttributeError(f"module 'tether' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_ALGORITHMS})


__all__ = ["ConfigError", "DataError", "ModelError", "RunResult", "TetherError", "TrainingError", "__version__",
           "dpo", "dry_run", "kto", "orpo", "reward_model", "run", "sft", "simpo", *_ALGORITHMS]
