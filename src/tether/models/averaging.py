"""Weight averaging of reward models fine-tuned from one initialisation (WARM, Ramé et al. 2024).

Reward models fine-tuned from the same starting weights stay linearly connected, so the mean of
their weights is itself a good reward model, and one that keeps what the members share and
averages away what each learned alone (the features one of them can be exploited on). WARM
averages M such models into one: the cost of a single reward model at PPO time, where an
ensemble (``reward.terms[i].combine``) scores with all M.

:func:`check_members` refuses what cannot be averaged meaningfully: different architectures or
shapes, different tokenizers, or (from each member's tether ``config.yaml``) different starting
weights. :func:`average_state_dicts` is the arithmetic.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from tether.common.errors import ConfigError

#: config.json keys that may differ between members (the gauge offset, bookkeeping).
FREE_KEYS = ("score_offset", "_name_or_path", "transformers_version", "warm_members")


def average_state_dicts(states, names: list[str] | None = None) -> dict:
    """The element-wise mean of M state dicts, computed in float64 and returned in each tensor's
    dtype. ``states``: an iterable (read one at a time, so only the running sum and one member are
    held: a generator that loads each member keeps memory at two models).

    Every member must hold the same keys with the same shapes and dtypes; a ValueError names the
    member and the key otherwise. Non-float tensors (an index buffer) must be equal and are kept."""
    total, first, count = None, None, 0
    for i, state in enumerate(states):
        name = names[i] if names else f"member {i}"
        if first is None:
            first = (name, {k: (v.shape, v.dtype) for k, v in state.items()})
            total = {k: v.to(torch.float64) if v.is_floating_point() else v.clone() for k, v in state.items()}
            count = 1
            continue
        first_name, meta = first
        if set(state) != set(meta):
            extra, missing = sorted(set(state) - set(meta)), sorted(set(meta) - set(state))
            raise ValueError(f"{name} has other weights than {first_name} (extra {extra[:3]}, missing {missing[:3]})")
        for key, tensor in state.items():
            shape, dtype = meta[key]
            if tensor.shape != shape or tensor.dtype != dtype:
                raise ValueError(f"{name}'s {key} is {tuple(tensor.shape)} {tensor.dtype}, {first_name}'s "
                                 f"{tuple(shape)} {dtype}")
            if tensor.is_floating_point():
                total[key] += tensor.to(torch.float64)
            elif not torch.equal(tensor, total[key]):
                raise ValueError(f"{name}'s {key} (not floating point) differs from {first_name}'s; it cannot be "
                                 "averaged")
        count += 1
    if first is None:
        raise ValueError("average_state_dicts needs at least one state dict")
    return {k: (v / count).to(first[1][k][1]) if v.is_floating_point() else v for k, v in total.items()}


def run_config(member: Path) -> dict | None:
    """A tether reward model's run config (its ``config.yaml``), or None without one."""
    path = member / "config.yaml"
    return (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.is_file() else None


def starting_weights(member: Path) -> str | None:
    """Where a tether reward model's training started (``model.name_or_path`` in its run's
    ``config.yaml``, resolved against the ``workdir`` it records), or None without one."""
    cfg = run_config(member)
    start = ((cfg or {}).get("model") or {}).get("name_or_path")
    if not start:
        return None
    local = Path(cfg.get("workdir") or ".") / start
    return str(local.resolve()) if local.exists() else str(start)


def head_init(member: Path) -> str:
    """What a reward model's fresh head was drawn from: ``head_seed N``, or ``run.seed N`` when
    no head_seed was set (the head is then drawn from the run's seeded generator)."""
    cfg = run_config(member) or {}
    if cfg.get("head_seed") is not None:
        return f"head_seed {cfg['head_seed']}"
    return f"run.seed {(cfg.get('run') or {}).get('seed')}"


def check_members(members: list[Path]) -> None:
    """ConfigError unless the members can be averaged: at least two, each a scalar-head reward
    model directory, the same config.json (but :data:`FREE_KEYS`), the same tokenizer files, the
    same starting weights and the same head initialisation by their tether run's config.yaml."""
    if len(members) < 2:
        raise ConfigError(f"--models: WARM averages at least two reward models, got {len(members)}.")
    configs = []
    for m in members:
        path = m / "config.json"
        if not path.is_file():
            raise ConfigError(f"--models: '{m}' has no config.json; expected a reward model directory (`tether rm`).")
        config = json.loads(path.read_text(encoding="utf-8"))
        if not any(a.endswith("ForSequenceClassification") for a in config.get("architectures") or []) or \
                config.get("num_labels", len(config.get("id2label") or {0: 0})) != 1:
            raise ConfigError(f"--models: '{m}' is not a reward model (architectures {config.get('architectures')}); "
                              "expected a scalar-head checkpoint from `tether rm`.")
        if (m / "adapter_config.json").is_file() and not (m / "model.safetensors").is_file():
            raise ConfigError(f"--models: '{m}' holds LoRA adapters only; average merged reward models.")
        configs.append({k: v for k, v in config.items() if k not in FREE_KEYS})
    for m, config in zip(members[1:], configs[1:]):
        differ = sorted(k for k in set(config) | set(configs[0]) if config.get(k) != configs[0].get(k))
        if differ:
            raise ConfigError(f"--models: '{m}' and '{members[0]}' are different architectures (config.json "
                              f"differs in {', '.join(differ[:5])}); WARM averages models of one shape.")
    tokenizers = [(m / "tokenizer.json").read_bytes() if (m / "tokenizer.json").is_file() else None for m in members]
    for m, tok in zip(members[1:], tokenizers[1:]):
        if tok != tokenizers[0]:
            raise ConfigError(f"--models: '{m}' has another tokenizer than '{members[0]}'; averaged weights would "
                              "read different token ids.")
    starts = [starting_weights(m) for m in members]
    for m, start in zip(members, starts):
        if start is None:
            raise ConfigError(f"--models: where '{m}' started from is unknown (no config.yaml of a `tether rm` run "
                              "beside it); WARM averages reward models fine-tuned from one initialisation.")
    heads = [head_init(m) for m in members]
    for m, head in zip(members[1:], heads[1:]):
        if head != heads[0]:
            raise ConfigError(f"--models: '{m}''s scalar head was initialised from {head}, '{members[0]}''s from "
                              f"{heads[0]}; WARM's members share one initialisation, the head's included: train "
                              "them with one head_seed and different run.seed (tether rm head_seed=0 run.seed=S).")
    for m, start in zip(members[1:], starts[1:]):
        if start != starts[0]:
            raise ConfigError(f"--models: '{m}' was fine-tuned from {start}, '{members[0]}' from {starts[0]}; WARM "
                              "averages reward models fine-tuned from one initialisation (Ramé et al. 2024): their "
                              "weights are linearly connected, others' are not.")
