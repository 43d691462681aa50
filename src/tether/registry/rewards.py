"""The reward kinds by name: what a reward source is, how a run builds it and how its dry run plans it.

A reward term (``reward.terms[i]``, or the ``reward`` block itself) is exactly one kind. A built-in
kind is selected by its own key (``models``, ``callable``, ``url``, ``length_penalty``, ``regex``,
``judge``: a block, selected when its ``enabled`` says so);
a plugin's by ``kind: NAME``, its settings in ``args`` (``["key=value", ...]``, the keys its entry
declares in ``options``). The run (:func:`tether.roles.sources.build_reward`), the dry run
(:mod:`tether.plan.rl_inputs`) and the config check read this table; importing it loads no torch.

``build``: ``"module:fn"``, ``fn(term, key, context) -> source``: the term's own block, its key
for errors, and a :class:`RewardContext` (the policy's tokenizer, the engines' settings, how models
load); never the run's whole config. The source answers ``score(rollout) -> (B,)``
(:class:`tether.roles.reward.RewardSource`). ``plan``: ``"module:fn"``,
``fn(term, key, role, cfg, tokenizer, roles)``: the run's own checks without weights, adding the
plan's lines (and each model it loads, sized) to ``roles`` (:class:`tether.plan.rl_inputs.RoleChecks`).
Every term's raw score is logged as ``reward/<name>``; ``logs`` says what else the kind logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.common.errors import ConfigError
from tether.registry.plugins import claim, load_plugins
from tether.common.targets import import_callable


@dataclass(frozen=True)
class RewardContext:
    """What a reward kind's builder may use besides its own term."""

    #: The policy's tokenizer (a model term reads the policy's token ids; its vocabulary is checked first).
    tokenizer: Any
    #: The engines' settings (:class:`tether.engines.EngineSettings`: device, precision).
    settings: Any
    #: ``model.dtype`` and ``model.attn_implementation``: how a model the kind loads is loaded.
    dtype: str = "auto"
    attn_implementation: str | None = None
    #: Responses per prompt (``group.size`` of a group algorithm, else 1): a group's rows are consecutive.
    group_size: int = 1


@dataclass(frozen=True)
class RewardKindSpec:
    """One reward kind: ``name`` (a built-in's selecting key, or a plugin's ``kind``), ``build`` and
    ``plan`` targets, a one-line ``summary``, ``options`` (a plugin kind's ``args`` keys; a built-in's
    other term keys), ``loads_models`` (the dry run sizes what it loads), ``logs`` (metrics besides
    ``reward/<name>``)."""

    name: str
    build: str
    plan: str
    summary: str
    options: tuple[str, ...] = ()
    loads_models: bool = False
    logs: str = ""
    #: Its source answers ``metrics()`` (what it did since the last call), logged every iteration.
    reports: bool = False
    #: Its source also answers ``token_scores(rollout) -> (B, A)``, rewards at token positions (a
    #: PRM's at step ends) whose sum per row is its ``score``: an algorithm that reads dense rewards
    #: (PPO's GAE) takes them where they fall (tether.loops.rl_setup.score_rollout).
    dense: bool = False

    def builder(self):
        return import_callable(self.build, f"the reward kind {self.name!r}")

    def planner(self):
        return import_callable(self.plan, f"the reward kind {self.name!r}")


#: kind name -> entry (built-ins first, in the order errors list them).
REWARD_KINDS: dict[str, RewardKindSpec] = {}
_BUILT_IN: set[str] = set()


def register_reward_kind(spec: RewardKindSpec) -> RewardKindSpec:
    """Add a reward kind; a built-in kind's name, or another module's, is refused."""
    if not spec.name.isidentifier() or ":" not in spec.build or ":" not in spec.plan:
        raise ConfigError(f"Reward kind {spec.name!r}: expected an identifier, and build and plan as "
                          "'module:function'.")
    claim(REWARD_KINDS, _BUILT_IN, "Reward kind", spec, code="build")
    REWARD_KINDS[spec.name] = spec
    return spec


def built_in_kinds() -> tuple[str, ...]:
    """The built-in kinds, each selected by a term key of its own name."""
    return tuple(name for name in REWARD_KINDS if name in _BUILT_IN)


def _is_set(value) -> bool:
    """A key selects its kind when set: a value, or a block (``judge``) whose ``enabled`` says so."""
    if hasattr(value, "enabled"):
        return bool(value.enabled)
    return value not in (None, "", [], ())


def kinds_set(term) -> list[str]:
    """The kinds a term (or the ``reward`` block) selects: each built-in whose key it sets, and its
    ``kind`` (exactly one in a valid term)."""
    found = [name for name in built_in_kinds() if _is_set(getattr(term, name, None))]
    kind = getattr(term, "kind", None)
    return found + ([kind] if kind else [])


def reward_kind(name: str, key: str) -> RewardKindSpec:
    """The entry of kind ``name`` (plugins loaded); a ConfigError naming ``key`` and the kinds otherwise."""
    if name not in REWARD_KINDS:
        load_plugins()
    if name not in REWARD_KINDS:
        raise ConfigError(f"Config key '{key}' = {name!r}: expected a registered reward kind "
                          f"({', '.join(REWARD_KINDS)}; a plugin registers one with register_reward_kind).")
    return REWARD_KINDS[name]


def kind_of(term, key: str) -> RewardKindSpec:
    """The one kind ``term`` (at config ``key``) selects."""
    kinds = kinds_set(term)
    if len(kinds) != 1:
        got = "sets no reward source" if not kinds else f"sets {' and '.join(repr(k) for k in kinds)}"
        raise ConfigError(f"Config key '{key}' {got}: a term is exactly one of {', '.join(built_in_kinds())}, or "
                          "kind: NAME of a plugin's reward kind (one term per source).")
    return reward_kind(kinds[0], f"{key}.kind")


def parse_args(args: list[str], spec: RewardKindSpec, key: str) -> dict[str, str]:
    """A plugin kind's ``args`` (``["key=value", ...]``) as a dict, each key one its entry declares."""
    out = {}
    for i, item in enumerate(args):
        name, eq, value = str(item).partition("=")
        if not eq or name.strip() not in spec.options:
            raise ConfigError(f"Config key '{key}.args[{i}]' = {item!r}: expected 'key=value' with key one of "
                              f"{', '.join(spec.options) or '(none: the kind takes no settings)'} (reward kind "
                              f"{spec.name!r}).")
        out[name.strip()] = value.strip()
    return out


register_reward_kind(RewardKindSpec(
    "models", "tether.roles.sources:build_model_reward", "tether.plan.rl_inputs:plan_model_reward",
    "reward models (sequence-classification checkpoints); several make an ensemble", ("combine", "std_coef"),
    loads_models=True))
register_reward_kind(RewardKindSpec(
    "callable", "tether.roles.sources:build_callable_reward", "tether.plan.rl_inputs:plan_callable_reward",
    "a Python function(prompts, responses) -> list[float]"))
register_reward_kind(RewardKindSpec(
    "url", "tether.roles.sources:build_remote_reward", "tether.plan.rl_inputs:plan_remote_reward",
    "a reward server (POST /v1/rewards, `tether serve --reward-model`)", ("api_key",),
    logs="the server's failures are errors naming the url"))
register_reward_kind(RewardKindSpec(
    "prm", "tether.roles.sources:build_process_reward", "tether.plan.rl_inputs:plan_process_reward",
    "a process reward model (`tether prm`): a reward at every step's end (log sigmoid of its logit, or the "
    "logit), dense where the algorithm reads rewards per token, their sum otherwise", ("prm_reward",),
    loads_models=True, dense=True))
register_reward_kind(RewardKindSpec(
    "length_penalty", "tether.roles.sources:build_length_penalty", "tether.plan.rl_inputs:plan_length_penalty",
    "-coef per response token beyond length_target", ("length_target",)))
register_reward_kind(RewardKindSpec(
    "regex", "tether.roles.sources:build_regex_reward", "tether.plan.rl_inputs:plan_regex_reward",
    "1 if a regular expression matches the response text, else 0"))
register_reward_kind(RewardKindSpec(
    "judge", "tether.roles.sources:build_judge_reward", "tether.plan.rl_inputs:plan_judge_reward",
    "an LLM judge scoring each response by a rubric over an OpenAI-compatible endpoint (RLAIF)",
    logs="judge/<name>/*: judgements, failures by kind, unparseable answers, tokens, latency",
    reports=True))
_BUILT_IN.update(REWARD_KINDS)
