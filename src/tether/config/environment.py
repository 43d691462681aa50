"""The ``environment`` block of an RL stage: multi-turn episodes instead of one response per prompt.

With ``kind`` set, every rollout is a set of episodes: the policy writes a turn, the environment
answers with observation messages (a tool's result, the next user turn), and so on until the
environment says the episode is over, ``max_turns`` assistant turns were written, or the episode
holds ``max_tokens`` response tokens. The kinds are :mod:`tether.registry.environments`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.common.errors import ConfigError
from tether.config.base import option, refuse_inert
from tether.registry.environments import environment_spec, is_built_in

#: The keys only the ``tools`` kind reads.
TOOL_KEYS = ("environment.tools", "environment.tool_timeout_s", "environment.tool_workers")


@dataclass(frozen=True)
class EnvironmentConfig:
    """Multi-turn episodes: the environment kind and the budgets of an episode."""

    kind: str = option("none", "none: one response per prompt. Else an environment kind (tether.registry."
                               "environments; built in: tools = the model calls Python functions as tools, "
                               "scripted = follow-up user turns from the data). docs/episodes.md.")
    max_turns: int = option(4, "The most assistant turns an episode has; an episode still going after them is "
                               "truncated.", ge=1)
    max_tokens: int | None = option(None, "Response tokens an episode may hold, sampled and observation tokens "
                                          "together (default: max_turns x rollout.max_new_tokens); an episode "
                                          "that reaches it is truncated.", ge=1)
    tools: list[str] = option(factory=list, help="The tools kind's code: 'module:function' (the tool is named after "
                                                  "the function) or 'name=module:function' each. A prompt row offers "
                                                  "the tools its `tools` schemas name.")
    tool_timeout_s: float = option(10.0, "Seconds one tool call may take; a later answer is an error observation, "
                                         "counted (env/tool_timeouts).", gt=0)
    tool_workers: int = option(4, "Threads running tool calls, shared by all episodes.", ge=1)
    args: list[str] = option(factory=list, help="A plugin environment's settings as key=value strings.")
    mask_truncated: bool = option(False, "Truncated episodes (cut by max_turns or max_tokens) train nothing: their "
                                         "tokens leave the policy, KL and value losses. They still count in their "
                                         "group's baseline and in every metric (env/truncated: the fraction masked).")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def budget(self, max_new_tokens: int) -> int:
        """Response tokens an episode may hold: ``max_tokens``, or max_turns x ``max_new_tokens``
        (the tokens a turn may sample)."""
        return self.max_tokens if self.max_tokens is not None else self.max_turns * max_new_tokens

    def tool_targets(self) -> dict[str, str]:
        """``tools`` as {tool name: 'module:function'}."""
        out = {}
        for i, entry in enumerate(self.tools):
            name, _, target = entry.rpartition("=") if "=" in entry else ("", "", entry)
            name = name or target.rpartition(":")[2]
            if ":" not in target or not name.isidentifier():
                raise ConfigError(f"Config key 'environment.tools[{i}]' = {entry!r}: expected 'module:function' or "
                                  "'name=module:function'.")
            if name in out:
                raise ConfigError(f"Config key 'environment.tools[{i}]' = {entry!r}: a second tool named {name!r}.")
            out[name] = target
        return out


def check_environment(cfg) -> None:
    """An RL config's ``environment`` block: a registered kind, no setting it would not read, and a
    chat template to render the turns with."""
    env = cfg.environment
    if not env.enabled:
        refuse_inert(cfg, ["environment"], "with environment.kind=none (single-turn rollouts)")
        return
    environment_spec(env.kind, "environment.kind")
    if env.kind != "tools":
        refuse_inert(cfg, TOOL_KEYS, f"with environment.kind={env.kind} (only the tools kind runs tools)")
    elif not env.tools:
        raise ConfigError("Config key 'environment.tools' is empty with environment.kind=tools: name the tools' code "
                          "('module:function' each).")
    else:
        env.tool_targets()
    if env.args and is_built_in(env.kind):
        raise ConfigError(f"Config key 'environment.args' = {env.args!r} is set with the built-in kind {env.kind!r}, "
                          "which reads none; drop it.")
    if cfg.model.chat_template == "never":
        raise ConfigError(f"Config key 'environment.kind' = {env.kind!r} with model.chat_template=never: an episode's "
                          "turns are rendered with the policy's chat template (docs/episodes.md, the token rule); "
                          "set model.chat_template=auto or always.")

def episode_budget(cfg) -> int:
    """Response tokens an episode of an RL config may hold (:meth:`EnvironmentConfig.budget`)."""
    return cfg.environment.budget(cfg.rollout.max_new_tokens)


__all__ = ["EnvironmentConfig", "check_environment", "episode_budget"]
