"""Where each RL role's model comes from, checked: every separate model (the reference, each reward
model, critic.path) reads the policy's token ids (:func:`check_token_id_readers`, before any weight),
the critic starts from ``critic.path``, a reward model or the policy, and the reward is a model,
an ensemble, a python callable, a reward server, the LoRA critic's own base, or a composition of
named, weighted terms (``reward.terms``)."""

from __future__ import annotations

from tether.config import RLConfig
from tether.engines import EngineSettings, InferenceEngine
from tether.common.errors import ConfigError, ModelError
from tether.models import load_scalar_model, load_tokenizer
from tether.models.loading import has_tokenizer_files
from tether.roles.reward import CallableReward, EnsembleReward, ModelReward, RewardSource, as_reward_source
from tether.roles.reward_terms import ComposedReward, LengthPenaltyReward, RegexReward
from tether.registry.rewards import RewardContext, kind_of
from tether.common.targets import import_callable


def same_vocab(tok_a, tok_b, name: str) -> None:
    """A model scoring the policy's token ids must read them as the policy does (the same vocabulary)."""
    if tok_a.get_vocab() != tok_b.get_vocab():
        raise ModelError(
            f"The {name} uses a different tokenizer from the policy ({len(tok_b)} tokens against the policy's "
            f"{len(tok_a)}, or the same count with other ids); tether scores token ids directly, so the reference, "
            "the reward model and the critic must share the policy's tokenizer."
        )


def check_reference_tokenizer(cfg, tokenizer) -> None:
    """A separate ``reference`` (PPO's, DPO's) must read token ids as the policy does: its log-probs
    are taken of the policy's tokens, so a reference with another vocabulary would score other text."""
    if cfg.reference and cfg.reference not in (cfg.model.name_or_path, cfg.model.tokenizer):
        same_vocab(tokenizer, load_tokenizer(cfg.reference, key="reference"), f"reference '{cfg.reference}'")


def token_id_readers(cfg: RLConfig) -> list[tuple[str, str]]:
    """(checkpoint, config key) of every separate model of an RL run that reads the policy's token
    ids: the reference, each reward model (of reward.models or of a term) and the critic's
    critic.path. Its own source (the policy, or critic.init's reward model, listed already) needs none."""
    readers = []
    if cfg.reference and cfg.reference not in (cfg.model.name_or_path, cfg.model.tokenizer):
        readers.append((cfg.reference, "reference"))
    readers += cfg.reward.model_sources()
    if cfg.needs_critic and not cfg.critic.shared_trunk and cfg.critic.path:
        readers.append((cfg.critic.path, "critic.path"))
    return readers


def check_token_id_readers(cfg: RLConfig, tokenizer) -> None:
    """Every model of :func:`token_id_readers` reads token ids as the policy's tokenizer writes them,
    checked from tokenizer and config files before any weight is read (the run and its dry run). A
    critic.path without tokenizer files is checked by its embedding's rows (:func:`_same_rows`)."""
    for path, key in dict.fromkeys(token_id_readers(cfg)):
        what = {"reference": "reference", "critic.path": "critic"}.get(key, "reward model")
        if key == "critic.path" and not has_tokenizer_files(path):
            _same_rows(cfg, path, key)
            continue
        same_vocab(tokenizer, load_tokenizer(path, key=key), f"{what} '{path}' ({key})")


def _same_rows(cfg: RLConfig, path: str, key: str) -> None:
    """A checkpoint without its tokenizer reads the policy's ids only if its embedding has the
    policy's rows (``vocab_size`` of both configs): one of another vocabulary has other rows."""
    from tether.models.loading import embedding_rows, load_model_config

    trust = cfg.model.trust_remote_code
    rows = embedding_rows(load_model_config(path, key, trust))
    policy = embedding_rows(load_model_config(cfg.model.name_or_path, "model.name_or_path", trust))
    if rows is not None and policy is not None and rows != policy:
        raise ModelError(
            f"The critic '{path}' ({key}) has no tokenizer files to compare, and its embedding has {rows:,} rows "
            f"against the policy's {policy:,}: it was trained on another tokenizer's ids, and tether scores token "
            "ids directly. Give a critic trained with the policy's tokenizer (saved beside it), or critic.init=policy "
            "without critic.path."
        )


def critic_source(cfg: RLConfig) -> tuple[str, str]:
    """The checkpoint a separate critic starts from and the config key that names it:
    critic.path; else, with critic.init=reward, the first reward model (its head already predicts
    the final score: Ouyang et al. 2022, sec. 3.5; with reward.terms, the first model term's first);
    else the policy (a fresh value head)."""
    if cfg.critic.path:
        return cfg.critic.path, "critic.path"
    if cfg.critic.init == "reward":
        return cfg.reward.model_sources()[0]  # the config refuses critic.init=reward without one
    return cfg.model.name_or_path, "model.name_or_path"


def build_reward(cfg: RLConfig, tokenizer, settings: EngineSettings) -> RewardSource:
    """The run's reward: the ``reward`` block's one source, or a composition of named, weighted terms
    (``reward.terms``); each source built by its kind's registry entry (:mod:`tether.registry.rewards`)
    from its own term and a :class:`RewardContext`."""
    context = RewardContext(tokenizer, settings, cfg.model.dtype, cfg.model.attn_implementation,
                            cfg.samples_per_prompt)
    if not cfg.reward.terms:
        return as_reward_source(kind_of(cfg.reward, "reward").builder()(cfg.reward, "reward", context))
    terms, dense = [], []
    for i, term in enumerate(cfg.reward.terms):
        key = f"reward.terms[{i}]"
        kind = kind_of(term, key)
        source = kind.builder()(term, key, context)
        if kind.dense and not callable(getattr(source, "token_scores", None)):
            raise ConfigError(f"Config key '{key}' ({term.name}): reward kind {kind.name!r} is registered as dense "
                              "(rewards at token positions), but its source has no token_scores(rollout) method; "
                              "expected one returning (B, A) rewards, or register the kind without dense=True.")
        terms.append((term.name, term.weight, as_reward_source(source)))
        dense.append(kind.dense)
    return ComposedReward(terms, dense)


def build_callable_reward(spec, key: str, context: RewardContext) -> RewardSource:
    """The ``callable`` kind: a python function of (prompts, responses)."""
    return CallableReward(import_callable(spec.callable, f"{key}.callable"), spec.callable)


def build_remote_reward(spec, key: str, context: RewardContext) -> RewardSource:
    """The ``url`` kind: a reward server, asked once that it answers."""
    from tether.roles.remote_reward import RemoteReward

    remote = RemoteReward(spec.url, spec.api_key, key=f"{key}.url")
    remote.check()
    return remote


def build_judge_reward(term, key: str, context: RewardContext) -> RewardSource:
    """The ``judge`` kind: an LLM judge over an OpenAI-compatible endpoint (asked once that it
    serves the model), or loaded in process (:class:`tether.roles.local_judge.LocalJudge`)
    (:class:`tether.roles.judge_reward.JudgeReward`)."""
    from tether.algos.judge_format import ScoreFormat
    from tether.roles.judge_client import JudgeClient
    from tether.roles.judge_reward import JudgeReward

    j = term.judge
    rubric = load_rubric(j.rubric, j.mode, f"{key}.judge.rubric")
    if j.path:
        from tether.roles.local_judge import LocalJudge

        client = LocalJudge(j.path, context.settings.device, j.max_tokens, j.temperature, j.batch_size,
                            context.dtype, key=f"{key}.judge.path")
    else:
        client = JudgeClient(j.url, j.model, j.api_key, j.timeout_s, j.retries, concurrency=j.concurrency,
                             max_tokens=j.max_tokens, temperature=j.temperature, key=f"{key}.judge")
    client.check()
    return JudgeReward(client, rubric, j.mode, j.verdict_pattern, ScoreFormat(j.verdict_pattern, j.low, j.high),
                       j.on_failure, j.max_failure_rate, name=term.name, key=f"{key}.judge",
                       group_size=context.group_size)


def load_rubric(path: str | None, mode: str, key: str) -> str:
    """A judge's rubric text: the file at ``path`` (it must hold the mode's placeholders: pointwise
    ``{prompt}`` and ``{response}``; pairwise ``{prompt}``, ``{response_a}``, ``{response_b}``; group
    ``{prompt}`` and ``{responses}``), or the mode's built-in one; a ConfigError naming ``key`` otherwise."""
    from pathlib import Path

    from tether.algos.judge_format import DEFAULT_GROUP_RUBRIC, DEFAULT_PAIRWISE_RUBRIC, DEFAULT_RUBRIC
    from tether.common.errors import ConfigError

    built_in = {"pointwise": DEFAULT_RUBRIC, "pairwise": DEFAULT_PAIRWISE_RUBRIC, "group": DEFAULT_GROUP_RUBRIC}
    if path is None:
        return built_in[mode]
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"Config key '{key}' = {path!r}: the rubric file could not be read ({err}).") from None
    needed = {"pointwise": ("{prompt}", "{response}"), "pairwise": ("{prompt}", "{response_a}", "{response_b}"),
              "group": ("{prompt}", "{responses}")}[mode]
    missing = [p for p in needed if p not in text]
    if missing:
        raise ConfigError(f"Config key '{key}' = {path!r}: the rubric has no {' or '.join(missing)} placeholder; a "
                          f"{mode} judge's rubric is filled with {', '.join(needed)} by plain replacement.")
    return text


def build_model_reward(spec, key: str, context: RewardContext) -> RewardSource:
    """The ``models`` kind: one reward model, or an ensemble of several."""
    members = []
    for path in spec.models:  # their tokenizers: check_token_id_readers, before any weight
        model = load_scalar_model(path, context.tokenizer, context.dtype, key=f"{key}.models",
                                  attn_implementation=context.attn_implementation)
        members.append(ModelReward(InferenceEngine(model, context.settings.device, context.settings.precision), path))
    if len(members) == 1:
        return members[0]
    return EnsembleReward(members, spec.combine, spec.std_coef)


def build_process_reward(term, key: str, context: RewardContext) -> RewardSource:
    """The ``prm`` kind: a process reward model scoring every step (:mod:`tether.roles.process_reward`)."""
    from tether.models.loading import load_model_config
    from tether.roles.process_reward import ProcessReward, separator_of

    config = load_model_config(term.prm, f"{key}.prm")
    separator = separator_of(config, term.prm, f"{key}.prm", context.tokenizer)
    model = load_scalar_model(term.prm, context.tokenizer, context.dtype, key=f"{key}.prm",
                              attn_implementation=context.attn_implementation)
    return ProcessReward(InferenceEngine(model, context.settings.device, context.settings.precision), separator,
                         term.prm, term.prm_reward)


def build_length_penalty(spec, key: str, context: RewardContext) -> RewardSource:
    """The ``length_penalty`` kind."""
    return LengthPenaltyReward(spec.length_penalty, spec.length_target)


def build_regex_reward(spec, key: str, context: RewardContext) -> RewardSource:
    """The ``regex`` kind."""
    return RegexReward(spec.regex)


SHARED_WITH_CRITIC = "the critic's base"  # make_roles' reward: the LoRA critic's base, adapters off


def shares_reward_base(cfg: RLConfig) -> bool:
    """The reward model is the LoRA critic's base with the adapters off: the critic starts from the
    one reward model (critic.init=reward, no critic.path) and trains adapters. Not with reward.terms
    (reward.models is then empty): a model term loads its own copy."""
    return (cfg.needs_critic and cfg.critic.lora.enabled and cfg.critic.init == "reward" and not cfg.critic.path
            and len(cfg.reward.models) == 1 and not cfg.critic.shared_trunk)


def reward_members(reward) -> list[ModelReward]:
    """The reward models inside a reward source (an ensemble's or a composed reward's terms',
    recursively); none for a callable, a server or a built-in term."""
    if isinstance(reward, ModelReward):
        return [reward]
    if isinstance(reward, EnsembleReward):
        return [m for member in reward.members for m in reward_members(member)]
    if isinstance(reward, ComposedReward):
        return [m for source in reward.sources for m in reward_members(source)]
    return []
