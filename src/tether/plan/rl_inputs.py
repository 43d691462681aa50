"""What an RL run reads before its weights, checked as :func:`tether.roles.build.build_roles` and
the run check it (same functions, same keys in the errors; every model loaded as the run loads
it, on the meta device, and the trained ones set up as the run sets them up), with each role's
parameter count."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.plan import meta_models
from tether.plan.memory import RoleSize
from tether.plan.params import shape_of
from tether.roles.groups import role_names
from tether.rollout import install_check, run_setup


@dataclass
class RLInputs:
    tokenizer: object
    prompts: object  # tether.loops.rl_setup.PromptSet
    prompt_limit: int
    eval_prompts: int | None
    actor_params: int
    role_sizes: dict[str, RoleSize] = field(default_factory=dict)
    role_lines: list[str] = field(default_factory=list)
    prompt_limit_capped_by: str | None = None  # why prompt_limit is below rollout.max_prompt_length
    actor_config: object = None  # the policy's transformers config (its shapes, for the memory model)


@dataclass
class RoleChecks:
    """What the role checks gather: sizes, plan lines and context lengths by the name the run uses;
    ``head``: the column a reward source's line starts with (the reward, or a term's name)."""

    sizes: dict[str, RoleSize] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    contexts: dict[str, int | None] = field(default_factory=dict)
    head: str = "reward    "

    def add(self, name: str, model) -> None:
        from tether.models.loading import context_length

        self.contexts[name] = context_length(model)


def _reference(cfg, tokenizer, actor, roles: RoleChecks) -> None:
    if cfg.distill.teacher_url:  # on-policy distillation's teacher behind an endpoint: asked as the run asks it
        from tether.roles.build import remote_teacher

        teacher = remote_teacher(cfg, tokenizer)
        roles.sizes["reference"] = RoleSize()
        roles.lines.append(f"reference  the teacher {teacher.model!r} at {cfg.distill.teacher_url} (answered, reads "
                           "the student's token ids alike)")
        return
    if cfg.lora.enabled and not cfg.reference:
        roles.sizes["reference"] = RoleSize()
        roles.lines.append("reference  the actor's base with its adapters off (no copy)")
        return
    shape = actor  # no reference given: the policy's checkpoint again, checked as the actor
    if cfg.reference:
        model = meta_models.causal_lm(cfg.reference, "reference", cfg, tokenizer)
        roles.add(cfg.reference, model)
        shape = shape_of(model)
    roles.sizes["reference"] = RoleSize(frozen=shape.params)
    roles.lines.append(f"reference  {cfg.reference or cfg.model.name_or_path}: {shape.params:,} parameters, frozen")


def _reward(cfg, tokenizer, roles: RoleChecks) -> None:
    """The reward block's source, or each term's, planned by its kind's registry entry."""
    from tether.registry.rewards import kind_of

    if not cfg.reward.terms:
        kind_of(cfg.reward, "reward").planner()(cfg.reward, "reward", "reward", cfg, tokenizer, roles)
        return
    roles.lines.append(f"reward     {len(cfg.reward.terms)} terms, the score sum_i weight_i * term_i:")
    for i, term in enumerate(cfg.reward.terms):
        key = f"reward.terms[{i}]"
        roles.head = f"           {term.name} (x {term.weight:g}):"
        kind_of(term, key).planner()(term, key, f"reward.{term.name}", cfg, tokenizer, roles)
    roles.head = "reward    "


def plan_length_penalty(term, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    roles.lines.append(f"{roles.head} -{term.length_penalty:g} per response token beyond {term.length_target}")


def plan_regex_reward(term, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    roles.lines.append(f"{roles.head} 1 if the response matches {term.regex!r}, else 0")


def plan_callable_reward(reward, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    """Imported as the run imports it."""
    from tether.common.targets import import_callable

    import_callable(reward.callable, f"{key}.callable")
    roles.lines.append(f"{roles.head} the Python callable {reward.callable}")


def plan_remote_reward(reward, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    """Asked once that it answers, as the run asks it."""
    from tether.roles.remote_reward import RemoteReward

    RemoteReward(reward.url, reward.api_key, key=f"{key}.url").check()
    roles.lines.append(f"{roles.head} the reward server at {reward.url} (answered)")


def plan_judge_reward(term, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    """The rubric read and the judge asked once that it serves its model, as the run does."""
    from tether.roles.judge_client import JudgeClient
    from tether.roles.sources import load_rubric

    j = term.judge
    load_rubric(j.rubric, j.mode, f"{key}.judge.rubric")
    rubric = j.rubric or "the built-in rubric"
    scale = (f"a score in [{j.low:g}, {j.high:g}]" if j.mode == "pointwise" else
             f"{j.mode}: each prompt's {cfg.samples_per_prompt} responses compared")
    scale = f"{rubric}, {scale}, on failure: {j.on_failure}"
    if j.path:
        from tether.roles.local_judge import judge_tokenizer

        path_key = f"{key}.judge.path"
        model = meta_models.causal_lm(j.path, path_key, cfg, judge_tokenizer(j.path, path_key))
        shape = shape_of(model)  # its context is its own (it reads text): not one of the policy's limits
        roles.sizes[role] = RoleSize(frozen=shape.params)
        roles.lines.append(f"{roles.head} the judge {j.path} in process: {shape.architecture}, {shape.params:,} "
                           f"parameters, frozen; {scale}")
        return
    client = JudgeClient(j.url, j.model, j.api_key, j.timeout_s, j.retries, key=f"{key}.judge")
    try:
        client.check()
    finally:
        client.close()
    roles.lines.append(f"{roles.head} the judge {j.model!r} at {j.url} (answered), {scale}")



def plan_model_reward(reward, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    """Each reward model checked as :func:`tether.roles.sources.build_model_reward` loads it, sized
    as role ``role`` (``role0``, ``role1``, ... for an ensemble)."""
    from tether.roles.sources import shares_reward_base

    head = roles.head
    for i, path in enumerate(reward.models):
        model = meta_models.scalar_model(path, f"{key}.models", cfg, tokenizer)
        roles.add(path, model)
        shape = shape_of(model)
        shared = shares_reward_base(cfg)
        roles.sizes[f"{role}{i if len(reward.models) > 1 else ''}"] = RoleSize(frozen=0 if shared else shape.params)
        roles.lines.append(f"{head} {path}: {shape.architecture}, {shape.params:,} parameters, frozen"
                           + (" (the LoRA critic's base, adapters off: no copy)" if shared else ""))
    if len(reward.models) > 1:
        roles.lines.append(f"           an ensemble of {len(reward.models)}, combined by {reward.combine}")


def plan_process_reward(term, key: str, role: str, cfg, tokenizer, roles: RoleChecks) -> None:
    """The PRM checked as :func:`tether.roles.sources.build_process_reward` loads it (its step
    separator one token of the policy's tokenizer), sized as role ``role``."""
    from tether.roles.process_reward import separator_of

    model = meta_models.scalar_model(term.prm, f"{key}.prm", cfg, tokenizer)
    separator_of(model.config, term.prm, f"{key}.prm", tokenizer)
    roles.add(term.prm, model)
    shape = shape_of(model)
    roles.sizes[role] = RoleSize(frozen=shape.params)
    roles.lines.append(f"{roles.head} {term.prm}: {shape.architecture}, {shape.params:,} parameters, frozen; a process "
                       f"reward model, steps ending at {model.config.step_separator!r}")


def _critic(cfg, tokenizer, actor_model, roles: RoleChecks):
    """The separate critic model as the run loads it (None without one)."""
    from tether.roles.sources import critic_source

    if not cfg.needs_critic:
        roles.lines.append(f"critic     none ({cfg.algorithm} has no value model)")
        return None
    if cfg.critic.shared_trunk:
        roles.sizes["critic"] = RoleSize(trained=actor_model.config.hidden_size + 1)
        roles.lines.append("critic     a value head on the actor's trunk")
        return None
    path, key = critic_source(cfg)
    model = meta_models.scalar_model(path, key, cfg, tokenizer, new_head=cfg.critic.init == "policy",
                                     head_init_std=0.02)
    roles.add(cfg.critic.path or "the critic", model)
    shape = shape_of(model)
    roles.lines.append(f"critic     from {path} (critic.init = {cfg.critic.init}): {shape.params:,} parameters, trained"
                       + (f" (LoRA r={cfg.critic.lora.r} + the value head)" if cfg.critic.lora.enabled else ""))
    return model


def rl_inputs(cfg) -> RLInputs:
    from tether.loops.rl_setup import build_evaluator, environment_class, load_prompt_set, prompt_limit
    from tether.models import load_tokenizer
    from tether.roles.sources import check_token_id_readers

    policy = cfg.model.name_or_path
    tokenizer = load_tokenizer(cfg.model.tokenizer or policy,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    check_token_id_readers(cfg, tokenizer)  # as build_roles: every model reading the policy's ids
    roles = RoleChecks()
    actor_model = meta_models.causal_lm(policy, "model.name_or_path", cfg, tokenizer)
    roles.add(policy, actor_model)
    actor = shape_of(actor_model)
    roles.sizes["actor"] = RoleSize()  # its place in the plan; the size once set up, below
    roles.lines.append(f"actor      {policy}: {actor.architecture}, {actor.params:,} parameters, trained"
                       + (f" (LoRA r={cfg.lora.r})" if cfg.lora.enabled else ""))
    _reference(cfg, tokenizer, actor, roles)
    if "reward" in role_names(cfg):  # an algorithm trained without a reward has no reward role
        _reward(cfg, tokenizer, roles)
    critic_model = _critic(cfg, tokenizer, actor_model, roles)
    # As make_roles does once every model is loaded: the actor's and the critic's LoRA and checkpointing
    # (their trained parameters as set up: exact under LoRA).
    roles.sizes["actor"] = meta_models.set_up(actor_model, cfg.lora, cfg.gradient_checkpointing, False, "lora")
    if critic_model is not None:
        roles.sizes["critic"] = meta_models.set_up(critic_model, cfg.critic.lora, cfg.critic.gradient_checkpointing,
                                                   True, "critic.lora")
    sizes, lines, contexts = roles.sizes, roles.lines, roles.contexts
    # What the run's engine would fail on (its install, its settings), checked as the run checks it.
    checked = install_check(cfg.rollout.engine, run_setup(cfg, tokenizer, context=contexts[policy], path=policy),
                            actor_model.config)
    if checked:
        lines.append(f"rollout    {checked}")
    cap = prompt_limit(cfg, contexts)
    prompts = load_prompt_set(cfg.prompts, cfg.prompts_split, tokenizer, cfg.model.chat_template, cap,
                                      environment=environment_class(cfg))
    evaluator = build_evaluator(cfg, tokenizer, cap)
    return RLInputs(tokenizer, prompts, cap.tokens, None if evaluator is None else len(evaluator.prompt_ids),
                    actor.params, sizes, lines, cap.capped_by, actor_model.config)
