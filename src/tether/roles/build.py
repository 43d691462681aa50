"""The RL roles of a config: models loaded, put on their device with its speedups, wrapped in
engines, and given to roles. A placement calls this where the roles run (this process, for the
local placement); the loop never does. Which roles share a process is :mod:`tether.roles.groups`;
where each model comes from, :mod:`tether.roles.sources`; how a trained model becomes a training
engine, :mod:`tether.roles.builder`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tether.config import RLConfig
from tether.engines import (
    AdapterOffEngine,
    EngineSettings,
    InferenceEngine,
    OptimizerSpec,
    engine_settings,
    prepare_models,
)
from tether.models import context_length, last_layer, load_causal_lm, load_scalar_model, load_tokenizer
from tether.models.lora import unwrap
from tether.roles.builder import base_engine, build_trained
from tether.roles.critic import Critic, SharedTrunkCritic, ValueHead
from tether.roles.groups import ROLE_NAMES, role_names
from tether.roles.policy import Actor, PolicyWithValueHead, Reference
from tether.roles.reward import ModelReward, RewardSource, as_reward_source
from tether.roles.sources import (
    SHARED_WITH_CRITIC,
    build_reward,
    check_token_id_readers,
    critic_source,
    shares_reward_base,
)
from tether.roles.sources import reward_members as _reward_members
from tether.rollout import make_engine
from tether.registry.engines import pi_old_captured
from tether.rollout.episodes import EpisodeEngine, EpisodeSpec

log = logging.getLogger(__name__)


@dataclass
class Roles:
    """The roles of an RL run, the policy's tokenizer, and each model's context length (positions,
    or None) by the name the config gives it (for length checks)."""

    actor: Actor | None
    reference: Reference | None
    critic: Critic | SharedTrunkCritic | None
    reward: RewardSource | None
    rollout: object | None  # a GenerationEngine sampling from the actor's weights
    tokenizer: object
    contexts: dict[str, int | None] = field(default_factory=dict)
    linear_backend: str = "aten"
    #: The sampling worker of asynchronous RL (rollout.max_staleness >= 1), else None.
    sampler: object | None = None

    def placed(self) -> dict[str, object]:
        """The roles by the names a placement serves them under (those built: a worker of a Ray
        placement builds only its own group's)."""
        # The sampler first: a placement closes roles in this order, and it may drive the rollout engine.
        named = {"sampler": self.sampler, "actor": self.actor, "reference": self.reference, "reward": self.reward,
                 "rollout": self.rollout, "critic": self.critic}
        return {name: role for name, role in named.items() if role is not None}


def build_roles(cfg: RLConfig, checkpoint: Path | None = None, needed=ROLE_NAMES) -> Roles:
    """Load the roles' models; with ``checkpoint`` the actor and critic come from it (resume: the
    full models, or the adapters on their bases under LoRA). ``needed``: build only these roles
    (a group of :func:`tether.roles.groups.role_groups`; the rollout engine comes with the actor)."""
    needed = set(needed) & set(role_names(cfg))
    settings = rl_engine_settings(cfg)
    policy_path = cfg.model.name_or_path
    tokenizer = load_tokenizer(cfg.model.tokenizer or policy_path,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    check_token_id_readers(cfg, tokenizer)  # every model reading the policy's ids, before any weight
    load = dict(tokenizer=tokenizer, dtype=cfg.model.dtype, trust_remote_code=cfg.model.trust_remote_code,
                attn_implementation=cfg.model.attn_implementation)
    full_actor = checkpoint is not None and not cfg.lora.enabled
    actor_model = load_causal_lm(str(checkpoint / "actor") if full_actor else policy_path, **load,
                                 key=None if full_actor else "model.name_or_path") if "actor" in needed else None
    # With LoRA and no separate reference, the reference is the actor's base (adapters off); a
    # distillation teacher behind an endpoint (distill.teacher_url) loads nothing here.
    shared_reference = cfg.lora.enabled and not cfg.reference
    remote_teacher = bool(cfg.distill.teacher_url)
    reference_model = None if shared_reference or remote_teacher or "reference" not in needed else load_causal_lm(
        cfg.reference or policy_path, **load, key="reference" if cfg.reference else "model.name_or_path")
    # With LoRA on a critic that starts from the (only) reward model, the reward model is the
    # critic's base with its adapters off: one copy of those weights too.
    if "reward" not in needed:
        reward = None
    elif shares_reward_base(cfg):
        reward = SHARED_WITH_CRITIC
    else:
        reward = build_reward(cfg, tokenizer, settings)
    adapters = {"actor": checkpoint / "actor" if checkpoint and cfg.lora.enabled else None,
                "critic": checkpoint / "critic" if checkpoint and cfg.critic.lora.enabled else None}
    if cfg.critic.shared_trunk or "critic" not in needed:
        # A resumed run's trained head; otherwise make_roles builds a fresh one.
        head = (ValueHead.from_pretrained(checkpoint / "critic", actor_model.config.hidden_size)
                if checkpoint and cfg.critic.shared_trunk else None)
        return make_roles(cfg, actor_model, reference_model, head, reward, tokenizer, settings, adapters, needed)
    # critic.init=reward: a trained head is expected (critic.path or the first reward model);
    # critic.init=policy: a fresh head (std 0.02) on critic.path or the policy is the point.
    critic_path, key = critic_source(cfg)
    if checkpoint is not None and not cfg.critic.lora.enabled:
        critic_path, key = str(checkpoint / "critic"), None
    critic_model = load_scalar_model(critic_path, head_init_std=0.02, new_head=cfg.critic.init == "policy",
                                     key=key, **load)
    return make_roles(cfg, actor_model, reference_model, critic_model, reward, tokenizer, settings, adapters, needed)


def rl_engine_settings(cfg: RLConfig) -> EngineSettings:
    """The engines' settings of an RL run: its ``run``, ``model`` and ``cpu`` blocks, and ``rl.compile``."""
    return engine_settings(cfg.run, cfg.model, cfg.cpu, cfg.rl.compile_mode if cfg.rl.compile else False)


def optimizer_specs(cfg: RLConfig) -> tuple[OptimizerSpec, OptimizerSpec]:
    """The actor's and the critic's AdamW and schedule, from their ``optim`` blocks, over the
    run's optimiser steps (a shared-trunk value head: the critic's learning rate in the actor's)."""
    p = cfg.rl
    total = p.iterations * p.epochs * (cfg.episodes // p.minibatch_size)
    groups = (("value_head", cfg.critic.optim.lr),) if cfg.critic.shared_trunk else ()
    return (OptimizerSpec.from_block(cfg.optim, total, p.fused_optimizer, groups),
            OptimizerSpec.from_block(cfg.critic.optim, total, p.fused_optimizer))


def make_roles(cfg: RLConfig, actor_model, reference_model, critic_model, reward, tokenizer,
               settings: EngineSettings | None = None, adapters: dict | None = None, needed=ROLE_NAMES) -> Roles:
    """The roles over loaded models; ``reward`` is a :class:`RewardSource` or a scalar-head model.

    With ``critic.shared_trunk`` the critic is a value head on the actor: ``critic_model`` is
    that :class:`ValueHead`, or None or any other model, which is then replaced by a fresh head.
    With ``lora``, ``reference_model`` None means the actor's base with its adapters off;
    ``adapters`` ({"actor", "critic"}: a directory or None) are loaded instead of fresh ones.
    ``needed``: the roles to make (a group of :func:`tether.roles.groups.role_groups`); the others are None.
    """
    needed = set(needed)
    settings = settings or rl_engine_settings(cfg)
    adapters = adapters or {}
    if isinstance(reward, torch.nn.Module):
        reward = ModelReward(InferenceEngine(reward, settings.device, settings.precision))
    elif reward is not None and reward != SHARED_WITH_CRITIC:
        reward = as_reward_source(reward)
    if reward == SHARED_WITH_CRITIC and not (cfg.critic.lora.enabled and not cfg.critic.shared_trunk):
        raise ValueError("a reward shared with the critic's base needs LoRA on a separate critic (critic.lora.r > 0)")
    shared = cfg.critic.shared_trunk
    has_actor, has_critic = "actor" in needed, "critic" in needed and not shared
    if shared and has_actor and not isinstance(critic_model, ValueHead):
        critic_model = ValueHead(actor_model.config.hidden_size)
    if "reference" in needed and reference_model is None and not cfg.lora.enabled and not cfg.distill.teacher_url:
        raise ValueError("reference_model None needs LoRA on the actor (lora.r > 0): the reference is its base")
    trunks = [*([actor_model] if has_actor else []), *([reference_model] if reference_model is not None else []),
              *(m.model for m in _reward_members(reward)), *([critic_model] if has_critic else [])]
    if not cfg.rl.trim_last_layer:
        for model in trunks:
            last_layer.run_in_full(model)
    prepared = prepare_models(trunks, settings)
    actor = reference = critic = rollout = sampler = None
    contexts = {}
    if has_actor:
        actor, critic, rollout, sampler, actor_model = _actor_roles(
            cfg, actor_model, critic_model, tokenizer, settings, prepared, adapters.get("actor"), contexts)
    if has_critic:
        critic = _critic_role(cfg, critic_model, settings, adapters.get("critic"), contexts)
    if reward == SHARED_WITH_CRITIC:
        name = cfg.reward.models[0] if cfg.reward.models else "reward model"
        reward = ModelReward(base_engine(critic.engine), name)
    if "reference" in needed and cfg.distill.teacher_url:
        reference = remote_teacher(cfg, tokenizer)
    elif "reference" in needed:
        if reference_model is None:
            reference_engine = AdapterOffEngine(actor.engine, actor_model)
        else:
            reference_engine = InferenceEngine(reference_model, settings.device, settings.precision)
            contexts[cfg.reference or cfg.model.name_or_path] = context_length(reference_model)
        reference = Reference(reference_engine, cfg.rollout.temperature)
    for member in _reward_members(reward):
        contexts[member.name] = context_length(member.model)
    return Roles(actor, reference, critic, reward, rollout, tokenizer, contexts, prepared.linear_backend, sampler)


def remote_teacher(cfg: RLConfig, tokenizer):
    """On-policy distillation's teacher behind ``distill.teacher_url`` as the reference role,
    checked (it answers, serves the model, reads the student's token ids alike) before the run."""
    from tether.roles.remote_teacher import RemoteTeacher

    d = cfg.distill
    teacher = RemoteTeacher(d.teacher_url, tokenizer, d.teacher_model, d.teacher_api_key, d.teacher_timeout_s,
                            d.teacher_batch_size)
    teacher.check()
    return teacher


def _actor_roles(cfg: RLConfig, actor_model, head, tokenizer, settings: EngineSettings, prepared, adapter,
                 contexts: dict):
    """(the actor, the shared-trunk critic or None, the generation engine over the actor, the actor's
    model as trained: the peft model under LoRA) from the prepared ``actor_model``; ``head``: the
    shared trunk's value head. Records the actor's context length in ``contexts``."""
    shared = cfg.critic.shared_trunk
    engine = build_trained(actor_model, optimizer_specs(cfg)[0], settings, lora=cfg.lora, adapter=adapter,
                           checkpointing=cfg.gradient_checkpointing, strategy=cfg.distributed.strategy,
                           prepared=True, wrap=(lambda lm: PolicyWithValueHead(lm, head)) if shared else None)
    model = engine.model.policy if shared else engine.model
    actor = Actor(engine, cfg.rollout.temperature, use_captured=pi_old_captured(cfg.rollout))
    contexts[cfg.model.name_or_path] = context_length(unwrap(model))
    # The generation engine over the actor (one that holds its own weights syncs from it).
    rollout = make_engine(cfg, tokenizer, unwrap(model), actor, contexts[cfg.model.name_or_path], settings, prepared)
    if cfg.environment.enabled:  # multi-turn episodes: the environment answers each turn
        rollout = episode_engine(cfg, rollout, tokenizer)
    sampler = _sampler(cfg, unwrap(model), actor, rollout, tokenizer, settings) if cfg.rollout.max_staleness else None
    return actor, SharedTrunkCritic(actor) if shared else None, rollout, sampler, model


def episode_spec(cfg: RLConfig) -> EpisodeSpec:
    """What an episode engine of the run's ``environment`` block is built from."""
    return EpisodeSpec.of(cfg.environment, cfg.rollout.max_new_tokens)


def episode_engine(cfg: RLConfig, engine, tokenizer) -> EpisodeEngine:
    """``engine`` sampling the episodes of ``environment.kind`` (one environment per episode). Under
    torchrun or on a Ray group of several workers, each process runs the episodes of its share of
    the prompts (its ``generate`` is declared ``@prompts``, the prompt rows split with the prompts)."""
    return episode_spec(cfg).wrap(engine, tokenizer)


def _sampler(cfg: RLConfig, lm, actor: Actor, engine, tokenizer, settings: EngineSettings):
    """The sampler of asynchronous RL (``rollout.max_staleness`` >= 1), synced from the actor (one
    per rank under torchrun, each sampling its rank's share): an engine that holds its own weights
    (vLLM) driven from a thread of its own; any other ``rollout.engine`` in a process of its own over
    a copy of the actor's causal LM ``lm`` (with an environment, the process runs the episodes: its
    engine wrapped as the run's own is)."""
    from tether.rollout import engine_spec
    from tether.rollout.worker import EngineThread, RolloutWorker, WorkerSpec

    if engine_spec(cfg.rollout.engine).holds_own_weights:
        return EngineThread(engine, actor.sync_weights)
    # Episodes keep the engine's log-probs: rollout/token_mismatch on the rollouts of current weights.
    episodes = episode_spec(cfg) if cfg.environment.enabled else None
    spec = WorkerSpec(cfg.rollout.engine, lm.config, tokenizer, autocast=settings.precision.autocast,
                      capture=cfg.rollout.is_correction != "none" or episodes is not None,
                      threads=cfg.rollout.worker_threads, episodes=episodes,
                      attn_implementation=cfg.model.attn_implementation, trust_remote_code=cfg.model.trust_remote_code,
                      dtype=next(lm.parameters()).dtype, device=str(settings.device))
    return RolloutWorker(spec, actor.sync_weights)


def _critic_role(cfg: RLConfig, critic_model, settings: EngineSettings, adapter, contexts: dict) -> Critic:
    """A separate critic over the prepared scalar ``critic_model`` (under LoRA its engine's model is
    the peft model, whose base may serve as the reward model too)."""
    critic = Critic(build_trained(critic_model, optimizer_specs(cfg)[1], settings, lora=cfg.critic.lora,
                                  adapter=adapter, checkpointing=cfg.critic.gradient_checkpointing, scalar=True,
                                  key="critic.lora", prepared=True,
                                  strategy=cfg.critic.strategy or cfg.distributed.strategy))
    contexts[cfg.critic.path or "the critic"] = context_length(unwrap(critic.engine.model))
    return critic
