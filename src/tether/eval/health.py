"""Training-health alarms: the reference texts' monitoring tables, evaluated while PPO runs.

The reference texts give tables for reading a PPO-RLHF run (ref. 003 "KL divergence as a health
monitor"; ref. 004 "Reading training logs", "Training stability toolbox", "Common failure
modes"). :class:`HealthMonitor` turns them into rules checked after every iteration on the
metrics the loop already logs (see docs/metrics.md):

========================  ========  =====================================================
rule                      level     fires when (defaults; every number is a config field)
========================  ========  =====================================================
kl_barely_moved           info      smoothed KL < ``kl_low`` (1) from iteration ``kl_low_after``
kl_drifting               warning   smoothed KL > ``kl_drift`` (10); clears below ``kl_healthy_high``
kl_catastrophic           alarm     smoothed KL > ``kl_catastrophic`` (20); clears below ``kl_drift``
reward_hacking            alarm     over the last ``hacking_window`` iterations the smoothed score,
                                    length *and* repetition all rose past their thresholds
entropy_collapse          warning   smoothed entropy < ``entropy_floor``;
                          alarm     < ``entropy_floor_alarm``
value_loss_exploding      alarm     smoothed value loss > ``value_loss_explode_factor`` x its early
                                    median, or a non-finite value loss
clipfrac_zero             info      clip fraction < ``clipfrac_low`` for ``clipfrac_patience``
                          warning   iterations in a row; warning after 3 x patience
clipfrac_high             warning   clip fraction > ``clipfrac_high`` for ``clipfrac_patience`` in a row
eos_collapse              warning   smoothed EOS rate < ``eos_rate_floor``
off_policy_drift          warning   smoothed share of tokens over ``rollout.is_cap`` > ``is_clipped_high``,
                                    or smoothed mean importance weight off 1 by > ``is_weight_drift``
                                    (runs with ``rollout.is_correction`` only)
nothing_to_learn          alarm     the actor's gradient norm was exactly 0 for ``no_signal_iters`` (2)
                                    iterations in a row: every update trained nothing (judged from
                                    the first iteration; the message names the likely cause)
========================  ========  =====================================================

"Smoothed" is the moving average of the last ``smooth_window`` finite values (batch statistics
are noisy: the demo notes measure ±0.15 gold per iteration at batch 64). No rule but
``nothing_to_learn`` is judged up to and including iteration ``warmup_iters``; those iterations
do enter the averages and the value-loss baseline.

**Firing policy.** An alarm name fires when its condition becomes true and stays *active*,
silent, while the condition holds. It fires again only if (a) it escalates to a higher level
(entropy_collapse warning -> alarm, clipfrac_zero info -> warning), or (b) it cleared (the
condition became false; the KL rules clear with hysteresis, see the table) and later
re-triggered. :meth:`HealthMonitor.observe` returns only these new alarms.

Usage in a training loop::

    monitor = HealthMonitor(cfg.health, echo=bar.write)   # echo prints alarms >= print_level
    for it in range(1, iterations + 1):
        stats = trainer.step()
        new = monitor.observe(it, stats)
        append_alarms(out / "alarms.jsonl", new)           # the report reads this file
        if monitor.should_stop:
            log.warning(monitor.stop_reason); break
    # resume: monitor.load_state_dict(saved["health"]) before the loop

Pure python: no torch, so it can run anywhere the metrics are (e.g. over a finished
``metrics.jsonl``: :func:`replay`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tether.config.health import EARLY_RULES, LEVELS, RULES, HealthConfig

#: The rules that read the KL to the reference as a leash (skipped where it is the objective).
KL_RULES = ("kl_catastrophic", "kl_drifting", "kl_barely_moved")
from tether.eval.health_fixes import FIXES

#: The metric each rule reads (names logged by ``loops/rl.py`` and the algorithms).
KEYS = {
    "kl": "objective/kl",
    "score": "objective/score",
    "length": "response/length_mean",
    "repetition": "response/repetition",
    "entropy": "objective/entropy",
    "value_loss": "ppo/val/loss",
    "clipfrac": "ppo/policy/clipfrac",
    "eos": "response/eos_rate",
    "actor_trained": "ppo/actor_trained",
    "is_clipped": "rollout/is_clipped_frac",
    "is_weight": "rollout/is_weight_mean",
    "grad_norm": "optim/grad_norm",
    "score_std": "objective/score_std",
    "pairs": "pairs/fraction",
    "kept": "selection/kept",
}

@dataclass
class Alarm:
    """One raised alarm. ``message`` holds the numbers that triggered it; ``fix`` the suggested fix.

    JSON form (one object per line of ``alarms.jsonl``)::

        {"name": "kl_drifting", "level": "warning", "iteration": 42,
         "message": "...", "fix": "...", "values": {"kl": 11.2, ...}}
    """

    name: str
    level: str  # 'info' | 'warning' | 'alarm'
    iteration: int
    message: str
    fix: str
    values: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Alarm":
        return cls(
            name=str(d["name"]),
            level=str(d["level"]),
            iteration=int(d["iteration"]),
            message=str(d.get("message", "")),
            fix=str(d.get("fix", "")),
            values=dict(d.get("values") or {}),
        )

    def format(self, with_fix: bool = True) -> str:
        text = f"[{self.level.upper()}] iteration {self.iteration}: {self.name}: {self.message}"
        return f"{text}\n    fix: {self.fix}" if with_fix and self.fix else text


def append_alarms(path: str | Path, alarms: Iterable[Alarm]) -> None:
    """Append alarms to ``path`` (``alarms.jsonl``), one JSON object per line; no-op when empty."""
    from tether.common.runtime import is_main  # local: the monitor is read by plots without torch

    alarms = list(alarms)
    if not alarms or not is_main():  # data parallel: rank 0 alone writes
        return
    with open(path, "a", encoding="utf-8") as f:
        for alarm in alarms:
            f.write(json.dumps(alarm.to_dict()) + "\n")


def read_alarms(path: str | Path) -> list[Alarm]:
    """All alarms of an ``alarms.jsonl`` (empty list when the file does not exist)."""
    path = Path(path)
    if not path.is_file():
        return []
    return [Alarm.from_dict(json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _float(value: Any) -> float | None:
    """Metric value -> float. The logger writes non-finite floats as strings ('nan', 'inf')."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    if hasattr(value, "item"):
        return float(value.item())
    return None


def _mean(xs: list[float]) -> float | None:
    finite = [x for x in xs if math.isfinite(x)]
    return sum(finite) / len(finite) if finite else None


def _slope(ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against 0..n-1 (per iteration)."""
    n = len(ys)
    mx = (n - 1) / 2
    my = sum(ys) / n
    den = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / den if den else 0.0


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


class HealthMonitor:
    """Evaluates the health rules on one metrics dict per iteration (see the module docstring).

    ``echo`` receives the formatted text of every new alarm of at least ``cfg.print_level``
    (default: stderr; pass ``tqdm.write``/``bar.write`` under a progress bar, or ``None`` for silence).
    """

    def __init__(self, cfg: HealthConfig | None = None, echo: Callable[[str], None] | None = _stderr,
                 kl_leash: bool = True):
        self.cfg = cfg if cfg is not None else HealthConfig()
        # False: the KL to the reference is no leash but the objective (on-policy distillation's
        # teacher), and the KL rules, whose bands and fixes are a leash's, are not judged.
        self.skipped = () if kl_leash else KL_RULES
        self.echo = echo
        self.alarms: list[Alarm] = []
        self.stop_reason: str | None = None
        self._history: dict[str, list[float]] = {k: [] for k in KEYS}
        self._keep = self.cfg.smooth_window + self.cfg.hacking_window + 2
        self._active: dict[str, str] = {}
        self._counts = {"clip_low": 0, "clip_high": 0}
        self._value_baseline_values: list[float] = []
        self._last_iteration: int | None = None

    # -- public API -------------------------------------------------------------------------
    @property
    def should_stop(self) -> bool:
        """True once an alarm named in ``cfg.stop_on`` has fired."""
        return self.stop_reason is not None

    @property
    def active(self) -> dict[str, str]:
        """Alarm name -> level of the conditions that currently hold."""
        return dict(self._active)

    def observe(self, iteration: int, metrics: dict[str, Any]) -> list[Alarm]:
        """Record one iteration's metrics; return the alarms that are new at this iteration."""
        if not self.cfg.enabled:
            return []
        self._last_iteration = iteration
        self._record(metrics)
        new: list[Alarm] = []
        for name in RULES if iteration > self.cfg.warmup_iters else EARLY_RULES:
            if name in self.skipped:
                continue
            result = getattr(self, f"_rule_{name}")(iteration)
            alarm = self._transition(name, iteration, result)
            if alarm is not None:
                new.append(alarm)
        self.alarms.extend(new)
        for alarm in new:
            if alarm.name in self.cfg.stop_on and self.stop_reason is None:
                self.stop_reason = (
                    f"health alarm '{alarm.name}' at iteration {alarm.iteration} (health.stop_on): {alarm.message}"
                )
            if self.echo is not None and LEVELS.index(alarm.level) >= LEVELS.index(self.cfg.print_level):
                self.echo(alarm.format())
        return new

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume monitoring (JSON-serialisable; non-finite floats as strings)."""
        return {
            "version": 1,
            "history": {k: [_json_float(x) for x in v] for k, v in self._history.items()},
            "active": dict(self._active),
            "counts": dict(self._counts),
            "value_baseline_values": list(self._value_baseline_values),
            "alarms": [a.to_dict() for a in self.alarms],
            "stop_reason": self.stop_reason,
            "last_iteration": self._last_iteration,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._history = {k: [] for k in KEYS}
        for k, v in state.get("history", {}).items():
            self._history[k] = [float(x) for x in v]
        self._active = dict(state.get("active", {}))
        self._counts = {"clip_low": 0, "clip_high": 0, **state.get("counts", {})}
        self._value_baseline_values = [float(x) for x in state.get("value_baseline_values", [])]
        self.alarms = [Alarm.from_dict(a) for a in state.get("alarms", [])]
        self.stop_reason = state.get("stop_reason")
        self._last_iteration = state.get("last_iteration")

    # -- bookkeeping ------------------------------------------------------------------------
    def _record(self, metrics: dict[str, Any]) -> None:
        for short, key in KEYS.items():
            value = _float(metrics.get(key))
            if value is None:
                continue
            if short in ("clipfrac", "grad_norm"):
                trained = _float(metrics.get(KEYS["actor_trained"]))
                if trained is not None and trained == 0.0:
                    continue  # critic warm-up: the actor did not move, its clip fraction means nothing
            if short == "clipfrac":
                self._counts["clip_low"] = self._counts["clip_low"] + 1 if value < self.cfg.clipfrac_low else 0
                self._counts["clip_high"] = self._counts["clip_high"] + 1 if value > self.cfg.clipfrac_high else 0
            if short == "value_loss" and len(self._value_baseline_values) < self.cfg.value_loss_baseline_iters:
                if math.isfinite(value):
                    self._value_baseline_values.append(value)
            series = self._history[short]
            series.append(value)
            if len(series) > self._keep:
                del series[: len(series) - self._keep]

    def _smoothed(self, short: str) -> float | None:
        return _mean(self._history[short][-self.cfg.smooth_window :])

    def _smoothed_series(self, short: str, length: int) -> list[float] | None:
        """The last ``length`` values of the moving-average series, or None when too short."""
        xs = self._history[short]
        if len(xs) < length:
            return None
        w = self.cfg.smooth_window
        out = []
        for end in range(len(xs) - length + 1, len(xs) + 1):
            m = _mean(xs[max(0, end - w) : end])
            if m is None:
                return None
            out.append(m)
        return out

    def _transition(self, name: str, iteration: int, result) -> Alarm | None:
        """Apply the firing policy: new or escalated -> an Alarm; condition gone -> clear."""
        if result is None:
            self._active.pop(name, None)
            return None
        level, message, values = result
        current = self._active.get(name)
        if current is not None and LEVELS.index(level) <= LEVELS.index(current):
            return None
        self._active[name] = level
        return Alarm(name, level, iteration, message, FIXES[name], {k: round(v, 6) for k, v in values.items()})

    # -- rules: each returns None (condition false) or (level, message, values) --------------
    def _rule_kl_catastrophic(self, iteration: int):
        kl = self._smoothed("kl")
        if kl is None:
            return None
        limit = self.cfg.kl_drift if "kl_catastrophic" in self._active else self.cfg.kl_catastrophic
        if kl > limit:
            return ("alarm", f"KL to the reference is {kl:.2f} nats/sequence (mean of the last "
                    f"{self.cfg.smooth_window} iterations), above the catastrophic band "
                    f"{self.cfg.kl_catastrophic:g}.", {"kl": kl})
        return None

    def _rule_kl_drifting(self, iteration: int):
        kl = self._smoothed("kl")
        if kl is None:
            return None
        limit = self.cfg.kl_healthy_high if "kl_drifting" in self._active else self.cfg.kl_drift
        if kl > limit:
            return ("warning", f"KL to the reference is {kl:.2f} nats/sequence (mean of the last "
                    f"{self.cfg.smooth_window} iterations), above the drift band {self.cfg.kl_drift:g} "
                    f"(healthy: up to {self.cfg.kl_healthy_high:g}).", {"kl": kl})
        return None

    def _rule_kl_barely_moved(self, iteration: int):
        kl = self._smoothed("kl")
        if kl is None or iteration < self.cfg.kl_low_after:
            return None
        if kl < self.cfg.kl_low:
            return ("info", f"KL to the reference is only {kl:.3f} nats/sequence after {iteration} "
                    f"iterations (below {self.cfg.kl_low:g}): the policy has barely changed.", {"kl": kl})
        return None

    def _rule_reward_hacking(self, iteration: int):
        k = self.cfg.hacking_window
        score = self._smoothed_series("score", k)
        length = self._smoothed_series("length", k)
        rep = self._smoothed_series("repetition", k)
        if score is None or length is None or rep is None:
            return None
        score_rise = _slope(score) * (k - 1)
        length_rise = _slope(length) * (k - 1)
        rep_rise = _slope(rep) * (k - 1)
        rel_length = length_rise / max(abs(length[0]), 1e-8)
        if (score_rise > self.cfg.hacking_score_rise and rel_length > self.cfg.hacking_length_rise
                and rep_rise > self.cfg.hacking_repetition_rise):
            return ("alarm", f"Over the last {k} iterations the score rose by {score_rise:+.3f} while mean "
                    f"length rose by {length_rise:+.1f} tokens ({rel_length:+.0%}, now {length[-1]:.1f}) and "
                    f"the repeated-bigram rate by {rep_rise:+.3f} (now {rep[-1]:.3f}).",
                    {"score_rise": score_rise, "length_rise": length_rise, "length_rise_rel": rel_length,
                     "repetition_rise": rep_rise, "length": length[-1], "repetition": rep[-1]})
        return None

    def _rule_entropy_collapse(self, iteration: int):
        ent = self._smoothed("entropy")
        if ent is None or ent >= self.cfg.entropy_floor:
            return None
        level = "alarm" if ent < self.cfg.entropy_floor_alarm else "warning"
        floor = self.cfg.entropy_floor_alarm if level == "alarm" else self.cfg.entropy_floor
        return (level, f"Policy entropy is {ent:.4f} nats/token (mean of the last {self.cfg.smooth_window} "
                f"iterations), below {floor:g}.", {"entropy": ent})

    def _rule_value_loss_exploding(self, iteration: int):
        xs = self._history["value_loss"]
        if not xs:
            return None
        if not math.isfinite(xs[-1]):
            return ("alarm", f"The value loss is {xs[-1]} (not finite).", {})
        if len(self._value_baseline_values) < self.cfg.value_loss_baseline_iters:
            return None
        base = statistics.median(self._value_baseline_values)
        vl = self._smoothed("value_loss")
        if vl is None:
            return None
        if vl > self.cfg.value_loss_explode_factor * max(base, 1e-8):
            return ("alarm", f"The value loss is {vl:.4g} (mean of the last {self.cfg.smooth_window} "
                    f"iterations), {vl / max(base, 1e-8):.1f}x its early median {base:.4g} (limit "
                    f"{self.cfg.value_loss_explode_factor:g}x).", {"value_loss": vl, "baseline": base})
        return None

    def _rule_clipfrac_zero(self, iteration: int):
        n, p = self._counts["clip_low"], self.cfg.clipfrac_patience
        if n < p:
            return None
        level = "warning" if n >= 3 * p else "info"
        last = self._history["clipfrac"][-1] if self._history["clipfrac"] else float("nan")
        return (level, f"The policy clip fraction has been below {self.cfg.clipfrac_low:g} for {n} "
                f"iterations in a row (last {last:.4f}).", {"clipfrac": last, "iterations": float(n)})

    def _rule_clipfrac_high(self, iteration: int):
        n, p = self._counts["clip_high"], self.cfg.clipfrac_patience
        if n < p:
            return None
        last = self._history["clipfrac"][-1]
        return ("warning", f"The policy clip fraction has been above {self.cfg.clipfrac_high:g} for {n} "
                f"iterations in a row (last {last:.3f}).", {"clipfrac": last, "iterations": float(n)})

    def _rule_eos_collapse(self, iteration: int):
        eos = self._smoothed("eos")
        if eos is None or eos >= self.cfg.eos_rate_floor:
            return None
        return ("warning", f"Only {eos:.0%} of responses end with EOS (mean of the last "
                f"{self.cfg.smooth_window} iterations; floor {self.cfg.eos_rate_floor:.0%}): the rest hit "
                "the length cap.", {"eos_rate": eos})


    def _rule_off_policy_drift(self, iteration: int):
        clipped, weight = self._smoothed("is_clipped"), self._smoothed("is_weight")
        if clipped is None or weight is None:
            return None
        if clipped <= self.cfg.is_clipped_high and abs(weight - 1) <= self.cfg.is_weight_drift:
            return None
        return ("warning", f"{clipped:.1%} of tokens have an importance weight over rollout.is_cap and the mean "
                f"weight is {weight:.3f} (means of the last {self.cfg.smooth_window} iterations; bands "
                f"{self.cfg.is_clipped_high:.0%} and 1 ± {self.cfg.is_weight_drift:g}).",
                {"is_clipped_frac": clipped, "is_weight_mean": weight})


    def _rule_nothing_to_learn(self, iteration: int):
        norms = self._history["grad_norm"][-self.cfg.no_signal_iters:]
        if len(norms) < self.cfg.no_signal_iters or any(n != 0.0 for n in norms):
            return None
        return ("alarm", f"The actor's gradient was exactly 0 in each of the last {len(norms)} iterations: "
                f"{no_signal_cause(self._last('pairs'), self._last('kept'), self._last('score_std'), self._last('eos'))}",
                {"grad_norm": 0.0})

    def _last(self, short: str) -> float | None:
        series = self._history[short]
        return series[-1] if series else None


def no_signal_cause(pairs: float | None, kept: float | None, score_std: float | None, eos: float | None) -> str:
    """The likeliest reason an iteration trained nothing, from its logged stats (None: not logged)."""
    if pairs == 0.0:
        why = "online DPO formed no pair (pairs/fraction 0): every prompt's responses scored alike"
    elif kept == 0.0:
        why = "rejection sampling kept no response (selection/kept 0): no score reached selection.min_score"
    elif score_std == 0.0:
        why = "every response got the same score (objective/score_std 0), so every advantage is 0"
    else:
        return "the loss does not depend on the weights (a zero KL coefficient, zero weights, or no trained tokens)."
    if eos == 0.0:
        why += ("; no response ended within rollout.max_new_tokens, so reward.eos_penalty gave each the same "
                "score")
    return why + "."


def _json_float(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


def replay(rows: Iterable[dict[str, Any]], cfg: HealthConfig | None = None) -> list[Alarm]:
    """Run the rules over logged rows (e.g. ``read_metrics(path, 'ppo')``); returns every alarm.

    Rows without PPO metrics (the step-0 ``data/*`` row) are skipped.
    """
    monitor = HealthMonitor(cfg, echo=None)
    for row in rows:
        if KEYS["kl"] not in row and KEYS["score"] not in row:
            continue
        monitor.observe(int(row["step"]), row)
    return monitor.alarms


__all__ = ["Alarm", "FIXES", "HealthConfig", "HealthMonitor", "KEYS", "LEVELS", "RULES", "append_alarms",
           "read_alarms", "replay"]
