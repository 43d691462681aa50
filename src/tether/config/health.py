"""The `health:` config block: thresholds of the training-health alarms (see tether.eval.health)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.config.base import option
from tether.common.errors import ConfigError

LEVELS = ("info", "warning", "alarm")

#: Every rule name, in the order the rules are evaluated.
RULES = (
    "kl_catastrophic",
    "kl_drifting",
    "kl_barely_moved",
    "reward_hacking",
    "entropy_collapse",
    "value_loss_exploding",
    "clipfrac_zero",
    "clipfrac_high",
    "eos_collapse",
    "off_policy_drift",
    "nothing_to_learn",
)

#: Rules judged from the first iteration, warm-up or not: a run that cannot learn says so at once.
EARLY_RULES = ("nothing_to_learn",)


@dataclass(frozen=True)
class HealthConfig:
    """Training-health alarms (the reference texts' monitoring tables, checked every iteration)."""

    enabled: bool = option(True, "Check the health rules after every RL iteration.")
    warmup_iters: int = option(
        5, "Judge nothing up to and including this iteration (its metrics still enter the averages).", ge=0
    )
    no_signal_iters: int = option(
        2, "nothing_to_learn (alarm) when the actor's gradient was exactly 0 this many iterations in a row "
        "(judged from the first iteration, warm-up or not).", ge=1
    )
    smooth_window: int = option(
        5, "Rules read the moving average of the last this-many iterations (batch stats are noisy).", ge=1
    )
    kl_low: float = option(
        1.0, "kl_barely_moved (info) when smoothed KL (nats/sequence) stays below this (ref. 003: < 1).", ge=0
    )
    kl_low_after: int = option(
        20, "kl_barely_moved is judged only from this iteration on: KL starts at 0 and needs time.", ge=0
    )
    kl_healthy_high: float = option(
        6.0, "Top of the healthy KL band (ref. 003: 2-6 nats); kl_drifting clears below it.", gt=0
    )
    kl_drift: float = option(
        10.0, "kl_drifting (warning) above this KL (ref. 003: > 10 'drifting far from SFT').", gt=0
    )
    kl_catastrophic: float = option(
        20.0, "kl_catastrophic (alarm) above this KL (ref. 003: > 20 'catastrophic divergence').", gt=0
    )
    entropy_floor: float = option(
        0.1, "entropy_collapse (warning) when smoothed entropy (nats/token) falls below this.", ge=0
    )
    entropy_floor_alarm: float = option(
        0.02, "entropy_collapse escalates to alarm below this entropy (nats/token).", ge=0
    )
    value_loss_explode_factor: float = option(
        10.0, "value_loss_exploding when smoothed value loss exceeds this x its early median.", gt=1
    )
    value_loss_baseline_iters: int = option(
        5, "The value loss's early median is taken over the first this-many iterations.", ge=1
    )
    clipfrac_low: float = option(
        0.001, "clipfrac_zero when the policy clip fraction stays below this for clipfrac_patience iterations.", ge=0
    )
    clipfrac_high: float = option(
        0.3, "clipfrac_high (warning) when the policy clip fraction stays above this for clipfrac_patience iterations.", gt=0, le=1
    )
    clipfrac_patience: int = option(
        5, "Iterations in a row the clip-fraction rules wait (clipfrac_zero: info, then warning after 3x).", ge=1
    )
    eos_rate_floor: float = option(
        0.5, "eos_collapse (warning) when the smoothed share of responses ending with EOS falls below this.",
        ge=0, le=1,
    )
    is_clipped_high: float = option(
        0.05, "off_policy_drift (warning) when the smoothed share of tokens over rollout.is_cap exceeds this.",
        ge=0, le=1,
    )
    is_weight_drift: float = option(
        0.1, "off_policy_drift (warning) when the smoothed mean importance weight is off 1 by more than this.", gt=0,
    )
    hacking_window: int = option(
        10, "reward_hacking: trend window K. Fires when over the last K iterations score, length and repetition all rose.", ge=3
    )
    hacking_score_rise: float = option(
        0.1, "reward_hacking: minimum rise of the smoothed objective/score over the window (score units).", ge=0
    )
    hacking_length_rise: float = option(
        0.1, "reward_hacking: minimum relative rise of the smoothed mean length over the window (0.1 = +10%).", ge=0
    )
    hacking_repetition_rise: float = option(
        0.02, "reward_hacking: minimum absolute rise of the smoothed repeated-bigram rate over the window.", ge=0
    )
    stop_on: list[str] = option(
        factory=list,
        help="Alarm names that stop the run when they fire, e.g. [kl_catastrophic, reward_hacking] "
        "(ref. 003: KL > 20 -> 'stop, debug'). Empty = only report.",
    )
    print_level: Literal["info", "warning", "alarm"] = option(
        "warning", "Print alarms of at least this level while training (all go to alarms.jsonl)."
    )

    def validate(self) -> None:
        unknown = [name for name in self.stop_on if name not in RULES]
        if unknown:
            raise ConfigError(
                f"Config key 'health.stop_on' has unknown alarm name(s) {unknown}; known: {', '.join(RULES)}."
            )
        if not self.kl_low <= self.kl_healthy_high <= self.kl_drift <= self.kl_catastrophic:
            raise ConfigError(
                "Config block 'health': KL bands must satisfy kl_low <= kl_healthy_high <= kl_drift <= "
                f"kl_catastrophic; got {self.kl_low}, {self.kl_healthy_high}, {self.kl_drift}, "
                f"{self.kl_catastrophic}."
            )
        if self.entropy_floor_alarm > self.entropy_floor:
            raise ConfigError(
                f"Config key 'health.entropy_floor_alarm' = {self.entropy_floor_alarm}: must be <= "
                f"health.entropy_floor = {self.entropy_floor}."
            )
        if self.clipfrac_low >= self.clipfrac_high:
            raise ConfigError(
                f"Config key 'health.clipfrac_low' = {self.clipfrac_low}: must be < health.clipfrac_high "
                f"= {self.clipfrac_high}."
            )
