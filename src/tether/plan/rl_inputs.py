"""What an RL run reads before its weights, checked as :func:`tether.roles.build.build_roles` and
the run check it (same functions, same keys in the errors), with each role's parameter count."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.plan.memory import RoleSize
from tether.plan.params import model_shape, role_size


@dataclass
class RLInputs:
    tokenizer: object
    prompts: object  # tether.loops.rl_setup.PromptSet
    prompt_limit: int
    eval_prompts: int | None
    actor_params: int
    role_sizes: dict[str, RoleSize] = field(default_factory=dict)
    role_lines: list[str] = field(default_factory=list)


def _model(path: str, key: str, trust: bool):
    from tether.models.loading import context_length, load_model_config

    config = load_model_config(path, key, trust)
    return config, context_length(config)


def rl_inputs(cfg) -> RLInputs:
    from tether.loops.rl_setup import build_evaluator, load_prompt_set, prompt_limit
    from tether.models import load_tokenizer
    from tether.models.loading import check_scalar_head_config
    from tether.roles.build import _same_vocab, shares_reward_base
    from tether.roles.reward import import_callable

    trust, policy = cfg.model.trust_remote_code, cfg.model.name_or_path
    tokenizer = load_tokenizer(cfg.model.tokenizer or policy,
                               key="model.tokenizer" if cfg.model.tokenizer else "model.name_or_path")
    sizes, lines, contexts = {}, [], {}
    policy_config, contexts[policy] = _model(policy, "model.name_or_path", trust)
    actor = model_shape(policy_config, scalar=False, trust_remote_code=trust)
    sizes["actor"] = role_size(actor, True, cfg.lora)
    lines.append(f"actor      {policy}: {actor.architecture}, {actor.params:,} parameters, trained"
                 + (f" (LoRA r={cfg.lora.r})" if cfg.lora.enabled else ""))
    if cfg.lora.enabled and not cfg.reference:
        sizes["reference"] = RoleSize()
        lines.append("reference  the actor's base with its adapters off (no copy)")
    else:
        path = cfg.reference or policy
        config, contexts[path] = _model(path, "reference" if cfg.reference else "model.name_or_path", trust)
        shape = model_shape(config, scalar=False, trust_remote_code=trust)
        sizes["reference"] = role_size(shape, False)
        lines.append(f"reference  {path}: {shape.params:,} parameters, frozen")
    reward = cfg.reward
    if reward.callable:
        import_callable(reward.callable, "reward.callable")
        lines.append(f"reward     the Python callable {reward.callable}")
    elif reward.url:
        from tether.roles.remote_reward import RemoteReward

        RemoteReward(reward.url, reward.api_key).check()
        lines.append(f"reward     the reward server at {reward.url} (answered)")
    else:
        for i, path in enumerate(reward.models):
            _same_vocab(tokenizer, load_tokenizer(path, key="reward.models"), f"reward model '{path}'")
            config, contexts[path] = _model(path, "reward.models", trust)
            check_scalar_head_config(config, path, "reward.models", trained_head=True)
            shape = model_shape(config, scalar=True, trust_remote_code=trust)
            shared = shares_reward_base(cfg)
            sizes[f"reward{i if len(reward.models) > 1 else ''}"] = RoleSize() if shared else role_size(shape, False)
            lines.append(f"reward     {path}: {shape.architecture}, {shape.params:,} parameters, frozen"
                         + (" (the LoRA critic's base, adapters off: no copy)" if shared else ""))
        if len(reward.models) > 1:
            lines.append(f"           an ensemble of {len(reward.models)}, combined by {reward.combine}")
    if not cfg.needs_critic:
        lines.append(f"critic     none ({cfg.algorithm} has no value model)")
    elif cfg.critic.shared_trunk:
        sizes["critic"] = RoleSize(trained=policy_config.hidden_size + 1)
        lines.append("critic     a value head on the actor's trunk")
    else:
        if cfg.critic.path:
            path, key = cfg.critic.path, "critic.path"
        elif cfg.critic.init == "reward":
            path, key = reward.models[0], "reward.models"
        else:
            path, key = policy, "model.name_or_path"
        config, contexts[cfg.critic.path or "the critic"] = _model(path, key, trust)
        check_scalar_head_config(config, path, key, trained_head=cfg.critic.init == "reward")
        shape = model_shape(config, scalar=True, trust_remote_code=trust)
        sizes["critic"] = role_size(shape, True, cfg.critic.lora, head_trained=True)
        lines.append(f"critic     from {path} (critic.init = {cfg.critic.init}): {shape.params:,} parameters, trained"
                     + (f" (LoRA r={cfg.critic.lora.r} + the value head)" if cfg.critic.lora.enabled else ""))
    if cfg.rollout.engine == "vllm":
        import importlib.util

        from tether.rollout.vllm_engine import vllm_missing

        if importlib.util.find_spec("vllm") is None:  # the run finds out when it builds the engine
            raise vllm_missing()
    cap = prompt_limit(cfg, contexts)
    prompts = load_prompt_set(cfg.prompts, cfg.prompts_split, tokenizer, cfg.model.chat_template, cap)
    evaluator = build_evaluator(cfg, tokenizer, cap)
    return RLInputs(tokenizer, prompts, cap.tokens, None if evaluator is None else len(evaluator.prompt_ids),
                    actor.params, sizes, lines)
