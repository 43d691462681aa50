"""KTO's config: the preference stages' tree with a reference and the `kto` block; what it refuses."""

from __future__ import annotations

import pytest

from tether.config import KTOConfig, load_config
from tether.common.errors import ConfigError

from tests.unit.config.test_config import SFT_MIN, error_of


def kto(*overrides):
    return load_config(KTOConfig, None, [*SFT_MIN, *overrides])


def test_the_defaults_are_the_papers():
    cfg = kto()
    assert (cfg.kto.beta, cfg.kto.desirable_weight, cfg.kto.undesirable_weight) == (0.1, 1.0, 1.0)
    assert cfg.reference is None and cfg.on_identical == "skip"


@pytest.mark.parametrize("key", ["kto.beta", "kto.desirable_weight", "kto.undesirable_weight"])
def test_a_weight_or_beta_must_be_positive(key):
    assert f"'{key}'" in error_of(kto, f"{key}=0")


def test_lora_dropout_is_refused():
    with pytest.raises(ConfigError, match="'lora.dropout' = 0.1: KTO needs 0"):
        kto("lora.r=4", "lora.dropout=0.1")
