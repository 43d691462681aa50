"""Health alarms: each rule trips on a stream built to trip it, and a healthy run stays silent."""

from __future__ import annotations

import json
import math
import random

import pytest

from tether.config.base import from_dict
from tether.common.errors import ConfigError
from tether.eval.health import (
    RULES,
    Alarm,
    HealthConfig,
    HealthMonitor,
    append_alarms,
    read_alarms,
    replay,
)


def healthy(it: int, rng: random.Random) -> dict:
    """One iteration of a healthy run: KL rises to ~4 then flattens, score rises then flattens,
    length and repetition steady, entropy slowly falling, value loss settling, some clipping."""
    g = rng.gauss
    return {
        "objective/kl": 4.0 * (1 - math.exp(-it / 15)) + g(0, 0.3),
        "objective/kl_coef": 0.05,
        "objective/score": 1.0 * (1 - math.exp(-it / 20)) + g(0, 0.1),
        "objective/entropy": 1.2 - 0.004 * it + g(0, 0.02),
        "response/length_mean": 20.0 + g(0, 1.0),
        "response/repetition": max(0.0, 0.03 + g(0, 0.01)),
        "response/eos_rate": min(1.0, 0.97 + g(0, 0.02)),
        "ppo/val/loss": 0.5 * math.exp(-it / 30) + 0.1 + abs(g(0, 0.02)),
        "ppo/policy/clipfrac": max(0.0, 0.1 + g(0, 0.03)),
        "ppo/actor_trained": 1.0,
    }


def stream(n: int = 100, seed: int = 0, **override) -> list[tuple[int, dict]]:
    """A healthy stream where each keyword (a metric name with '/' as '__') is replaced by f(it)."""
    rng = random.Random(seed)
    out = []
    for it in range(1, n + 1):
        row = healthy(it, rng)
        for key, fn in override.items():
            row[key.replace("__", "/")] = fn(it)
        out.append((it, row))
    return out


def run(rows, cfg: HealthConfig | None = None) -> HealthMonitor:
    monitor = HealthMonitor(cfg, echo=None)
    for it, row in rows:
        monitor.observe(it, row)
    return monitor


def names(monitor: HealthMonitor) -> list[str]:
    return [a.name for a in monitor.alarms]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_healthy_stream_is_silent(seed) -> None:
    monitor = run(stream(150, seed))
    assert monitor.alarms == []
    assert not monitor.should_stop


def test_kl_barely_moved_is_info_after_kl_low_after() -> None:
    monitor = run(stream(objective__kl=lambda it: 0.2))
    (alarm,) = monitor.alarms
    assert (alarm.name, alarm.level, alarm.iteration) == ("kl_barely_moved", "info", 20)
    assert "0.200" in alarm.message and "beta" in alarm.fix


def test_kl_drifting_fires_once_above_drift_band() -> None:
    monitor = run(stream(objective__kl=lambda it: 0.15 * it))  # 15 nats at it=100
    assert names(monitor) == ["kl_drifting"]
    alarm = monitor.alarms[0]
    assert alarm.level == "warning"
    assert alarm.values["kl"] > 10
    # the smoothed KL crosses 10 a couple of iterations after the raw one (moving average of 5)
    assert 67 <= alarm.iteration <= 72
    assert "increase beta" in alarm.fix.lower() or "raise kl.coef" in alarm.fix


def test_kl_catastrophic_is_an_alarm() -> None:
    monitor = run(stream(objective__kl=lambda it: 0.4 * it))
    assert names(monitor) == ["kl_drifting", "kl_catastrophic"]
    cat = monitor.alarms[1]
    assert cat.level == "alarm" and cat.values["kl"] > 20
    assert "stop" in cat.fix.lower()


def test_where_the_kl_is_the_objective_its_leash_rules_are_not_judged() -> None:
    # On-policy distillation: the KL to the reference (the teacher) starts high and falls; the KL
    # rules' bands and fixes ("raise kl.coef") are a leash's, so they stay silent. The others do not.
    rows = stream(objective__kl=lambda it: 40.0 - 0.39 * it, response__eos_rate=lambda it: 0.1)
    monitor = HealthMonitor(None, echo=None, kl_leash=False)
    for it, row in rows:
        monitor.observe(it, row)
    assert names(monitor) == ["eos_collapse"]
    assert "kl_catastrophic" in names(run(rows))


def test_alarm_fires_again_only_after_clearing() -> None:
    def kl(it):
        return 30.0 if it <= 30 or it > 60 else 1.0

    monitor = run(stream(objective__kl=kl))
    cats = [a for a in monitor.alarms if a.name == "kl_catastrophic"]
    assert [a.iteration for a in cats] == [6, 61 + 3]  # cleared at 34 (smoothed < kl_drift), re-fired at 64 (smoothed > 20)


def test_reward_hacking_when_score_length_and_repetition_rise_together() -> None:
    def ramp(base, slope):
        return lambda it: base + slope * max(0, it - 50)

    monitor = run(stream(objective__score=ramp(0.9, 0.05), response__length_mean=ramp(20, 0.5),
                         response__repetition=ramp(0.03, 0.01)))
    hacks = [a for a in monitor.alarms if a.name == "reward_hacking"]
    assert len(hacks) == 1 and hacks[0].level == "alarm"
    assert 52 <= hacks[0].iteration <= 60
    assert "length" in hacks[0].message and "repeated-bigram" in hacks[0].message


@pytest.mark.parametrize("still", ["response__length_mean", "response__repetition", "objective__score"])
def test_reward_hacking_needs_all_three_trends(still) -> None:
    def ramp(base, slope):
        return lambda it: base + slope * max(0, it - 50)

    series = {"objective__score": ramp(0.9, 0.05), "response__length_mean": ramp(20, 0.5),
              "response__repetition": ramp(0.03, 0.01)}
    series[still] = {"response__length_mean": lambda it: 20.0, "response__repetition": lambda it: 0.03,
                     "objective__score": lambda it: 0.9}[still]
    assert "reward_hacking" not in names(run(stream(**series)))


def test_entropy_collapse_warns_then_escalates() -> None:
    monitor = run(stream(objective__entropy=lambda it: max(0.005, 1.0 - 0.02 * it)))
    ents = [a for a in monitor.alarms if a.name == "entropy_collapse"]
    assert [a.level for a in ents] == ["warning", "alarm"]
    assert ents[0].iteration < ents[1].iteration
    assert ents[1].values["entropy"] < 0.02


def test_value_loss_exploding_vs_early_median() -> None:
    monitor = run(stream(ppo__val__loss=lambda it: 0.3 if it < 60 else 0.3 * 1.3 ** (it - 60)))
    (alarm,) = [a for a in monitor.alarms if a.name == "value_loss_exploding"]
    assert alarm.level == "alarm" and alarm.values["baseline"] == pytest.approx(0.3)
    assert alarm.values["value_loss"] > 3.0


def test_non_finite_value_loss_fires_immediately() -> None:
    rows = stream(30)
    rows[20][1]["ppo/val/loss"] = "nan"  # how MetricsLogger writes a non-finite float
    monitor = run(rows)
    (alarm,) = monitor.alarms
    assert (alarm.name, alarm.iteration) == ("value_loss_exploding", 21)


def test_clipfrac_zero_info_then_warning() -> None:
    monitor = run(stream(40, ppo__policy__clipfrac=lambda it: 0.0))
    zs = [a for a in monitor.alarms if a.name == "clipfrac_zero"]
    assert [(a.level, a.iteration) for a in zs] == [("info", 6), ("warning", 15)]


def test_clipfrac_ignores_critic_warmup_iterations() -> None:
    def trained(it):
        return 0.0 if it <= 30 else 1.0

    monitor = run(stream(40, ppo__policy__clipfrac=lambda it: 0.0 if it <= 30 else 0.1, ppo__actor_trained=trained))
    assert "clipfrac_zero" not in names(monitor)


def test_clipfrac_high_after_patience() -> None:
    monitor = run(stream(60, ppo__policy__clipfrac=lambda it: 0.5 if it > 30 else 0.1))
    (alarm,) = monitor.alarms
    assert (alarm.name, alarm.level, alarm.iteration) == ("clipfrac_high", "warning", 35)


def test_eos_collapse() -> None:
    monitor = run(stream(80, response__eos_rate=lambda it: 0.98 if it < 40 else 0.1))
    (alarm,) = monitor.alarms
    assert (alarm.name, alarm.level) == ("eos_collapse", "warning")
    assert 41 <= alarm.iteration <= 44 and alarm.values["eos_rate"] < 0.5


def test_off_policy_drift() -> None:
    """Runs with rollout.is_correction log the weights; the rule trips when many tokens go over
    the cap (or the mean weight drifts), and runs without those metrics never judge it."""
    clipped = run(stream(60, rollout__is_clipped_frac=lambda it: 0.01 if it < 30 else 0.2,
                         rollout__is_weight_mean=lambda it: 1.0))
    (alarm,) = clipped.alarms
    assert (alarm.name, alarm.level) == ("off_policy_drift", "warning")
    assert 31 <= alarm.iteration <= 34 and alarm.values["is_clipped_frac"] > 0.05
    drifted = run(stream(60, rollout__is_clipped_frac=lambda it: 0.0,
                         rollout__is_weight_mean=lambda it: 1.0 if it < 30 else 0.8))
    assert [a.name for a in drifted.alarms] == ["off_policy_drift"]
    assert not run(stream(60, rollout__is_clipped_frac=lambda it: 0.01, rollout__is_weight_mean=lambda it: 0.99)).alarms


def test_warmup_is_respected() -> None:
    rows = stream(30, objective__kl=lambda it: 50.0)
    assert [a.iteration for a in run(rows, HealthConfig(warmup_iters=10)).alarms] == [11, 11]
    assert [a.iteration for a in run(rows, HealthConfig(warmup_iters=0)).alarms] == [1, 1]


def test_stop_on() -> None:
    rows = stream(objective__kl=lambda it: 0.4 * it)
    plain = run(rows)
    assert not plain.should_stop and plain.stop_reason is None
    stopping = HealthMonitor(HealthConfig(stop_on=["kl_catastrophic"]), echo=None)
    stopped_at = None
    for it, row in rows:
        new = stopping.observe(it, row)
        if stopping.should_stop:
            stopped_at = it
            assert [a.name for a in new] == ["kl_catastrophic"]
            break
    assert stopped_at is not None and stopped_at < 100
    assert "kl_catastrophic" in stopping.stop_reason and f"iteration {stopped_at}" in stopping.stop_reason
    # a warning-level rule in stop_on stops too
    warn = run(rows, HealthConfig(stop_on=["kl_drifting"]))
    assert warn.should_stop and "kl_drifting" in warn.stop_reason


def test_state_round_trip_resumes_identically() -> None:
    rows = stream(objective__kl=lambda it: 0.4 * it, objective__entropy=lambda it: max(0.005, 1.0 - 0.02 * it))
    full = run(rows, HealthConfig(stop_on=["kl_catastrophic"]))
    first = run(rows[:45], HealthConfig(stop_on=["kl_catastrophic"]))
    state = json.loads(json.dumps(first.state_dict()))  # must survive JSON
    resumed = HealthMonitor(HealthConfig(stop_on=["kl_catastrophic"]), echo=None)
    resumed.load_state_dict(state)
    for it, row in rows[45:]:
        resumed.observe(it, row)
    assert [a.to_dict() for a in resumed.alarms] == [a.to_dict() for a in full.alarms]
    assert resumed.stop_reason == full.stop_reason
    assert resumed.active == full.active


def test_echo_respects_print_level() -> None:
    printed = []
    monitor = HealthMonitor(HealthConfig(print_level="warning"), echo=printed.append)
    for it, row in stream(40, ppo__policy__clipfrac=lambda it: 0.0):
        monitor.observe(it, row)
    assert len(monitor.alarms) == 2 and len(printed) == 1
    assert printed[0].startswith("[WARNING] iteration 15: clipfrac_zero") and "fix:" in printed[0]


def test_disabled_monitor_is_silent() -> None:
    assert run(stream(objective__kl=lambda it: 50.0), HealthConfig(enabled=False)).alarms == []


def test_alarms_jsonl_round_trip(tmp_path) -> None:
    path = tmp_path / "alarms.jsonl"
    alarms = run(stream(objective__kl=lambda it: 0.4 * it)).alarms
    append_alarms(path, alarms[:1])
    append_alarms(path, [])
    append_alarms(path, alarms[1:])
    assert read_alarms(path) == alarms
    line = json.loads(path.read_text().splitlines()[0])
    assert set(line) == {"name", "level", "iteration", "message", "fix", "values"}
    assert read_alarms(tmp_path / "missing.jsonl") == []
    assert Alarm.from_dict(line) == alarms[0]


def test_replay_over_logged_rows() -> None:
    rows = [{"stage": "ppo", "step": 0, "data/prompts": 10}]
    rows += [{"stage": "ppo", "step": it, **row} for it, row in stream(objective__kl=lambda it: 0.4 * it)]
    assert [a.name for a in replay(rows)] == ["kl_drifting", "kl_catastrophic"]


def test_config_block_and_validation() -> None:
    cfg = from_dict(HealthConfig, {"stop_on": ["reward_hacking"], "kl_drift": 5, "kl_healthy_high": 2.5,
                                   "kl_catastrophic": 15, "kl_low": 0.2})
    assert cfg.stop_on == ["reward_hacking"] and cfg.kl_drift == 5.0
    with pytest.raises(ConfigError, match="stop_on"):
        from_dict(HealthConfig, {"stop_on": ["kl_catastrophc"]})
    with pytest.raises(ConfigError, match="KL bands"):
        from_dict(HealthConfig, {"kl_drift": 30})
    with pytest.raises(ConfigError, match="print_level"):
        from_dict(HealthConfig, {"print_level": "debug"})
    assert set(RULES) == {"kl_barely_moved", "kl_drifting", "kl_catastrophic", "reward_hacking",
                          "entropy_collapse", "value_loss_exploding", "clipfrac_zero", "clipfrac_high",
                          "eos_collapse", "off_policy_drift", "nothing_to_learn"}


def test_health_config_is_the_config_block() -> None:
    import dataclasses

    from tether.config.health import HealthConfig as ConfigBlock
    from tether.config.stages import RLConfig

    assert HealthConfig is ConfigBlock
    assert isinstance(RLConfig().health, HealthConfig)
    fields = {f.name: f for f in dataclasses.fields(HealthConfig)}
    assert fields["kl_drift"].metadata["gt"] == 0 and fields["kl_drift"].metadata["help"]


def test_health_module_imports_first_without_a_cycle() -> None:
    import subprocess
    import sys

    code = "import tether.eval.health, tether.config; print(tether.config.RLConfig.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


# -- nothing_to_learn: a run whose updates train nothing says so within its first iterations ------------

def zero_rows(n: int, **extra) -> list[dict]:
    return [{"objective/kl": 0.0, "optim/grad_norm": 0.0, "ppo/actor_trained": 1.0, **extra} for _ in range(n)]


@pytest.mark.parametrize("extra, cause", [
    ({"pairs/fraction": 0.0, "response/eos_rate": 0.0}, "online DPO formed no pair"),
    ({"selection/kept": 0.0}, "rejection sampling kept no response"),
    ({"objective/score_std": 0.0, "response/eos_rate": 0.0}, "reward.eos_penalty gave each the same score"),
    ({"objective/score_std": 0.4}, "the loss does not depend on the weights"),
])
def test_zero_gradients_fire_at_the_second_iteration_despite_the_warm_up(extra, cause) -> None:
    monitor = HealthMonitor(HealthConfig(), echo=None)  # warmup_iters 5: no other rule judges yet
    fired = [monitor.observe(it, row) for it, row in enumerate(zero_rows(3, **extra), 1)]
    assert fired[0] == [] and [a.name for a in fired[1]] == ["nothing_to_learn"] and fired[2] == []
    alarm = fired[1][0]
    assert alarm.level == "alarm" and alarm.iteration == 2 and cause in alarm.message, alarm.message


def test_one_zero_gradient_or_a_critic_warm_up_is_not_nothing_to_learn() -> None:
    monitor = HealthMonitor(HealthConfig(), echo=None)
    rows = [{"optim/grad_norm": 0.0}, {"optim/grad_norm": 0.3}, {"optim/grad_norm": 0.0},
            {"optim/grad_norm": 0.0, "ppo/actor_trained": 0.0}, {"optim/grad_norm": 1e-9}]
    assert [a for it, row in enumerate(rows, 1) for a in monitor.observe(it, row)] == []
    # The alarm clears when a gradient comes back, and fires again if it goes.
    monitor = HealthMonitor(HealthConfig(no_signal_iters=1), echo=None)
    names = [[a.name for a in monitor.observe(it, {"optim/grad_norm": g})] for it, g in enumerate([0, 1, 0], 1)]
    assert names == [["nothing_to_learn"], [], ["nothing_to_learn"]]


def test_nothing_to_learn_can_stop_the_run() -> None:
    monitor = HealthMonitor(HealthConfig(stop_on=["nothing_to_learn"]), echo=None)
    for it, row in enumerate(zero_rows(2), 1):
        monitor.observe(it, row)
    assert monitor.should_stop and "nothing_to_learn" in monitor.stop_reason
