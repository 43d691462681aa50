"""Typed config trees, YAML presets and dotted overrides."""

from tether.config.base import describe, from_dict, load_config, rebase_paths, replace, save_config, to_dict
from tether.config.stages import (DPOConfig, GenRMConfig, ORPOConfig, PRMConfig, RLConfig, RewardModelConfig,
                                   SFTConfig, SimPOConfig)
from tether.config.kto import KTOConfig

__all__ = [
    "DPOConfig",
    "KTOConfig",
    "ORPOConfig",
    "RLConfig",
    "RewardModelConfig",
    "SFTConfig",
    "GenRMConfig",
    "PRMConfig",
    "SimPOConfig",
    "describe",
    "rebase_paths",
    "from_dict",
    "load_config",
    "replace",
    "save_config",
    "to_dict",
]
