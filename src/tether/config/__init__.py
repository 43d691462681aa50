"""Typed config trees, YAML presets and dotted overrides."""

from tether.config.base import describe, from_dict, load_config, rebase_paths, replace, save_config, to_dict
from tether.config.stages import DPOConfig, PPOConfig, RewardModelConfig, SFTConfig

__all__ = [
    "DPOConfig",
    "PPOConfig",
    "RewardModelConfig",
    "SFTConfig",
    "describe",
    "rebase_paths",
    "from_dict",
    "load_config",
    "replace",
    "save_config",
    "to_dict",
]
