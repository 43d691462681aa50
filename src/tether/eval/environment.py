"""Episodes in `tether eval`: the policy and the reference run the episodes of the environment a
policy was trained with (``--environment``: its run directory, or any YAML file with an
``environment:`` block), so both are measured the way the run sampled them.

The block is read and checked as training reads it (a registered kind, its tools' code); each
prompt row is checked by the kind before any weights load, naming the file and row; an episode's
prompt plus its token budget must fit the smallest context of the models, as a single response
must.
"""

from __future__ import annotations

from pathlib import Path

from tether.common.errors import ConfigError, DataError, TetherError
from tether.common.outputs import shown
from tether.config.base import from_dict, read_yaml
from tether.config.environment import EnvironmentConfig
from tether.registry.environments import environment_spec
from tether.rollout.episodes import EpisodeSpec


def environment_block(path: str, flag: str = "--environment") -> EnvironmentConfig:
    """The ``environment`` block of ``path`` (a run directory: its config.yaml; or a YAML file),
    checked; a ConfigError naming ``flag`` and the file when there is none or it is off."""
    source = Path(path)
    if source.is_dir():
        source = source / "config.yaml"
    if not source.is_file():
        raise ConfigError(f"{flag} '{shown(path)}': no such file; expected a run directory (holding config.yaml) "
                          "or a YAML file with an `environment:` block.")
    try:
        data = read_yaml(source)
    except TetherError as err:
        raise ConfigError(f"{flag} '{shown(path)}': {err}") from None
    block = data.get("environment") if isinstance(data, dict) else None
    if not isinstance(block, dict) or block.get("kind", "none") == "none":
        raise ConfigError(f"{flag} '{shown(path)}': {source} has no `environment:` block with a kind; expected the "
                          "config of a run trained on episodes (environment.kind set).")
    try:
        env = from_dict(EnvironmentConfig, block, prefix="environment", notices=False)
        environment_spec(env.kind, "environment.kind")
        env.tool_targets()
    except TetherError as err:
        raise ConfigError(f"{flag} '{shown(path)}' ({source}): {err}") from None
    return env


def episode_spec(env: EnvironmentConfig, max_new_tokens: int) -> EpisodeSpec:
    """The episodes of ``env`` sampling ``max_new_tokens`` per turn (``--max-new-tokens``)."""
    return EpisodeSpec.of(env, max_new_tokens)


def episode_prompts(source: str, tokenizer, env: EnvironmentConfig, limit: int, budget: int, context):
    """(prompt ids, texts, rows) of the first ``limit`` rows of ``source`` (``--prompts``), each
    checked by the environment kind and, with ``context`` = (positions, whose), its prompt plus the
    episode's ``budget`` of response tokens within that context (a DataError naming the row)."""
    from tether.data import load_records
    from tether.loops.rl_setup import episode_prompt

    kind = environment_spec(env.kind, "environment.kind").load()
    records = load_records(source, key="--prompts")[:limit]
    if not records:
        raise DataError(f"{source}: no prompts to evaluate; expected at least one row.")
    ids, texts, rows = [], [], []
    for rec in records:
        prompt_ids, text, row = episode_prompt(rec, tokenizer, kind)
        if context is not None and len(prompt_ids) + budget > context[0]:
            raise DataError(f"{rec.source}, row {rec.row}: the episode's opening is {len(prompt_ids)} tokens and an "
                            f"episode may hold {budget} response tokens (environment.max_tokens, or max_turns x "
                            f"--max-new-tokens): past the {context[0]}-token context of {context[1]}; lower "
                            "--max-new-tokens or the environment's max_tokens.")
        ids.append(prompt_ids)
        texts.append(text)
        rows.append(row)
    return ids, texts, rows
