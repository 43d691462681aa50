"""One term of a composed reward (``reward.terms``): a named, weighted reward source.

The RL stages' score is then sum_i weight_i * term_i; each term's raw score is logged as
``reward/<name>``. A term is exactly one source: reward models, a python callable, a reward
server, a built-in (a length penalty, a regular expression), or a plugin's reward kind
(``kind``); the kinds are :mod:`tether.registry.rewards`'s.
"""

from __future__ import annotations

import re
from dataclasses import MISSING, dataclass, fields
from typing import Literal

from tether.config.base import option, section
from tether.config.judge import JudgeConfig
from tether.common.errors import ConfigError
from tether.registry.rewards import built_in_kinds, kinds_set, parse_args, reward_kind

#: A term's name is part of a metric name (``reward/<name>``): a plain identifier.
TERM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RewardTermConfig:
    """A named, weighted reward source inside ``reward.terms``."""

    name: str = option("", "Required: the term's name, an identifier (letters, digits, _), unique among the "
                           "terms; its raw score is logged as reward/<name>.")
    weight: float = option(1.0, "The term's weight in the score sum_i weight_i * term_i (0 = logged only).")
    models: list[str] = option(
        factory=list, help="Reward model checkpoints, loaded as reward.models; several make an ensemble.", path=True
    )
    combine: Literal["mean", "min", "mean_minus_std"] = option(
        "mean", "How this term's ensemble combines (two or more models).")
    std_coef: float = option(1.0, "k in mean - k*std for combine=mean_minus_std.", ge=0)
    callable: str | None = option(None, "A python reward `module:function(prompts, responses) -> list[float]`.")
    url: str | None = option(None, "A reward server's URL (`tether serve --reward-model ...`), scored via POST "
                                   "/v1/rewards.")
    api_key: str | None = option(None, "API key for this term's url; saved in config.yaml, so prefer null and the "
                                        "TETHER_API_KEY variable.")
    length_penalty: float | None = option(
        None, "Built-in: score = -length_penalty * max(0, response tokens - length_target), the response's tokens "
              "counted as PPO's response mask counts them (EOS included).", ge=0)
    length_target: int = option(0, "Response tokens free of the length penalty.", ge=0)
    regex: str | None = option(None, "Built-in: a Python regular expression; score 1.0 when re.search finds it in "
                                     "the response text, else 0.0.")
    prm: str | None = option(None, "A process reward model (`tether prm`'s checkpoint, its step_separator in its "
                                   "config.json): a reward at every step's end (prm_reward). PPO (and GRPO with "
                                   "group.advantage=process) take these step rewards at their tokens; the other "
                                   "algorithms their sum as the term's score. docs/process.md.", path=True)
    prm_reward: Literal["log_prob", "logit"] = option(
        "log_prob", "A prm step's reward: log sigmoid(s) of the PRM's logit s (<= 0; summed over the steps, the log "
                    "of the product of the step probabilities, which no extra step can raise), or the logit s "
                    "itself (a step the PRM likes is then worth adding: PPO learned to insert steps on the demo).")
    judge: JudgeConfig = section(JudgeConfig, "An LLM judge scoring each response by a rubric over an OpenAI-"
                                              "compatible endpoint (RLAIF); selected by judge.url. docs/judges.md.")
    normalize: bool = option(False, "Standardise this term by its running mean and std (every batch so far) "
                                    "before weighting: terms of different scales then weigh as their weights say; "
                                    "the statistics are logged (objective/<name>/mean, /std) and saved for resume.")
    limit: float | None = option(None, "Make this term a cost constraint, E[term] <= limit, instead of a summand: "
                                       "the score is (r - sum_k lambda_k c_k) / (1 + sum_k lambda_k) (Safe RLHF), "
                                       "each multiplier lambda_k raised by dual ascent while its limit is broken.")
    multiplier_lr: float = option(0.5, "The constraint's dual-ascent step: lambda += multiplier_lr * (batch mean - "
                                       "limit), kept within [0, multiplier_max].", gt=0)
    multiplier_max: float = option(100.0, "The constraint's largest multiplier: a limit that can never be met "
                                          "stops its multiplier here (constraint/<name>/violation stays > 0).", gt=0)
    multiplier_init: float = option(0.0, "The constraint's multiplier at the first iteration.", ge=0)
    kind: str | None = option(None, "A plugin's reward kind by its registered name (tether.registry.rewards), "
                                    "configured by args.")
    args: list[str] = option(factory=list, help="The plugin kind's settings as key=value strings (the keys its "
                                                 "entry declares).")

    def kinds(self) -> list[str]:
        """The kinds this term selects: each built-in whose key it sets, and its ``kind`` (exactly one
        in a valid term)."""
        return kinds_set(self)

    def judge_set(self) -> list[str]:
        """The judge block's keys set to anything but their defaults."""
        default = JudgeConfig()
        return [f.name for f in fields(JudgeConfig) if getattr(self.judge, f.name) != getattr(default, f.name)]

    def check(self, key: str) -> None:
        """Errors name ``key`` (``reward.terms[i]``): the name, one source, no inert setting, a valid regex."""
        if not TERM_NAME.fullmatch(self.name):
            raise ConfigError(f"Config key '{key}.name' = {self.name!r}: every term needs a name made of letters, "
                              "digits and _ (not starting with a digit); it names the term's metric reward/<name>.")
        kinds = self.kinds()
        if len(kinds) != 1:
            got = "sets no reward source" if not kinds else f"sets {' and '.join(repr(k) for k in kinds)}"
            raise ConfigError(f"Config key '{key}' ({self.name}) {got}: a term is exactly one of "
                              f"{', '.join(built_in_kinds())}, or kind: NAME of a plugin's reward kind (one term "
                              "per source).")
        if self.kind:
            parse_args(self.args, reward_kind(self.kind, f"{key}.kind"), key)
        inert = []
        if len(self.models) < 2:
            inert += [("combine", "with fewer than two models (it combines an ensemble's scores)"),
                      ("std_coef", "with fewer than two models (it is combine=mean_minus_std's k)")]
        elif self.combine != "mean_minus_std":
            inert.append(("std_coef", f"with combine={self.combine} (it is mean_minus_std's k)"))
        if not self.url:
            inert.append(("api_key", "with no url (it is the reward server's key)"))
        if self.length_penalty is None:
            inert.append(("length_target", "with no length_penalty"))
        if not self.kind:
            inert.append(("args", "with no kind (they are a plugin kind's settings)"))
        if not self.prm:
            inert.append(("prm_reward", "with no prm (it is a process reward model's step reward)"))
        if self.limit is None:
            inert += [(leaf, "with no limit (it is a cost constraint's setting)")
                      for leaf in ("multiplier_lr", "multiplier_max", "multiplier_init")]
        elif self.normalize:
            inert.append(("normalize", "on a cost constraint (its limit is in the term's own units)"))
        elif self.weight != 1.0:
            inert.append(("weight", "on a cost constraint (its multiplier weighs it; the limit is in the term's "
                                    "own units)"))
        defaults = {f.name: f.default_factory() if f.default is MISSING else f.default for f in fields(self)}
        for leaf, why in inert:
            if getattr(self, leaf) != defaults[leaf]:
                raise ConfigError(f"Config key '{key}.{leaf}' = {getattr(self, leaf)!r} is set {why}, so it would "
                                  f"have no effect; drop it (default {defaults[leaf]!r}).")
        if self.judge.enabled:
            self.judge.check(f"{key}.judge")
        elif self.judge != JudgeConfig():
            raise ConfigError(f"Config key '{key}.judge' sets {', '.join(self.judge_set())} without judge.url, so it "
                              "would have no effect; set judge.url (the judge server) or drop them.")
        if self.limit is not None and self.multiplier_init > self.multiplier_max:
            raise ConfigError(f"Config key '{key}.multiplier_init' = {self.multiplier_init!r} is above "
                              f"'{key}.multiplier_max' = {self.multiplier_max!r}.")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as err:
                raise ConfigError(f"Config key '{key}.regex' = {self.regex!r}: not a valid Python regular "
                                  f"expression ({err}).") from None
