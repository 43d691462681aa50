"""tether: PPO-based RLHF (SFT → Bradley-Terry reward model → PPO) that runs on a laptop CPU.

The stages as Python functions (each takes a config object, a dict or a YAML path and returns a
:class:`RunResult`; see :mod:`tether.api`)::

    import tether
    sft = tether.sft({"model.name_or_path": "Qwen/Qwen2.5-0.5B", "data.train": "demos.jsonl", "run.out": "runs/sft"})
"""

__version__ = "0.1.0"

from tether.api import RunResult, dpo, dry_run, grpo, ppo, reinforce_pp, reward_model, rloo, sft  # noqa: E402
from tether.errors import ConfigError, DataError, ModelError, TetherError, TrainingError  # noqa: E402

__all__ = ["ConfigError", "DataError", "ModelError", "RunResult", "TetherError", "TrainingError", "__version__",
           "dpo", "dry_run", "grpo", "ppo", "reinforce_pp", "reward_model", "rloo", "sft"]
