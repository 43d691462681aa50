"""Model cards: the ``README.md`` of every final model directory, in the Hugging Face format.

The YAML header is huggingface_hub's :class:`ModelCardData` (``library_name``, ``base_model``,
``tags``, ``datasets``, ``pipeline_tag``); the body says which stage made the model from what,
its key settings as resolved, its final metrics, the tether version and how to load it.
"""

from __future__ import annotations

import math
from pathlib import Path

#: Settings shown on every card, after the stage's own (its registry entry's ``card_keys``).
COMMON_KEYS = ("run.seed", "run.precision", "model.dtype", "lora.r", "lora.alpha")


def description(stage: str) -> str:
    """What a model trained by ``stage`` is: its stage entry's purpose (an RL algorithm's from its entry)."""
    from tether.registry.stages import stage_spec

    return stage_spec(stage, "model_card").purpose


def base_model_of(name_or_path: str) -> str | None:
    """The hub model a model descends from: a hub id itself, or the ``base_model`` of a local
    checkpoint's card (a tether run's); None for a local model without one."""
    from tether.models.loading import looks_local

    if not (Path(name_or_path).expanduser().exists() or looks_local(name_or_path)):
        return name_or_path
    card = Path(name_or_path).expanduser() / "README.md"
    if not card.is_file():
        return None
    from huggingface_hub import ModelCard

    try:
        base = ModelCard.load(card).data.base_model
    except Exception:  # noqa: BLE001 - a card we cannot read names no base
        return None
    return base if isinstance(base, str) else None


def _hub_datasets(cfg) -> list[str]:
    """The stage's data sources that are hub datasets (as the loaders tell them from local files)."""
    from tether.data.records import looks_like_hub_id

    names = []
    data = getattr(cfg, "data", None)
    if data is not None:
        names += [data.train, data.eval]
    names += [getattr(cfg, "prompts", None), getattr(getattr(cfg, "eval", None), "prompts", None)]
    out = []
    for name in names:
        if isinstance(name, str) and name and not Path(name).expanduser().exists() and looks_like_hub_id(name):
            hub_id = name.split(":")[0]  # name[:subset]
            if hub_id not in out:
                out.append(hub_id)
    return out


def capped_values(limits: dict | None) -> dict[str, str]:
    """Key -> "TOKENS (capped from KEY=VALUE: why)" for each limit of ``limits`` (key ->
    LengthLimit) that the models' context capped below its configured value."""
    return {key: f"{limit.tokens} ({limit.capped_by})" for key, limit in (limits or {}).items() if limit.capped_by}


def _value(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ", ".join(f"`{v}`" for v in value) or "(none)"
    return f"`{value}`" if isinstance(value, str) else str(value)


def _final_metrics(metrics: dict) -> dict[str, float]:
    """Numbers worth a reader's eye: held-out metrics and the RL objective, finite ones only."""
    keep = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        if key.startswith(("eval/", "objective/")) or key in ("steps", "iterations", "score_offset"):
            keep[key] = value
    return keep


def model_card(cfg, stage: str, metrics: dict, out: str | Path, role: str = "policy",
               limits: dict | None = None) -> str:
    """The ``README.md`` text for the model a stage saves in ``out``.

    ``stage``: a registered stage (:mod:`tether.registry.stages`); ``role``: policy (a causal LM), reward (the
    reward model) or critic (PPO's value model, saved in ``RUN/critic``). ``limits``: config key ->
    the :class:`~tether.loops.common.LengthLimit` the run used, shown instead of the configured
    value where the models' context capped it (the card says what ran).
    """
    from huggingface_hub import ModelCard, ModelCardData

    import tether
    from tether.config import to_dict
    from tether.config.base import flat_dict

    from tether.registry.stages import SUPERVISED_CARD_KEYS, stage_spec

    spec = stage_spec(stage, "model_card")
    rl = spec.algorithm is not None
    settings = flat_dict(to_dict(cfg))
    if rl:
        settings["group.size"] = cfg.samples_per_prompt  # null resolves per algorithm: show what ran
        terms = settings.pop("reward.terms", None)
        if terms:  # a composed reward: its terms and weights in place of the (empty) reward.models
            settings["reward.terms"] = [f"{t['name']} x {t['weight']:g}" for t in terms]
            settings.pop("reward.models", None)
    ran = capped_values(limits)
    source = cfg.model.name_or_path
    scalar = role in ("reward", "critic")
    lora = bool(settings.get("lora.r")) or bool(settings.get("lora.adapter"))
    tags = ["tether", stage, *(["rlhf"] if rl else []), *(["lora"] if lora else []),
            *(["reward-model"] if role == "reward" else []), *(["value-model"] if role == "critic" else [])]
    data = ModelCardData(library_name="transformers", base_model=base_model_of(source), tags=tags,
                         datasets=_hub_datasets(cfg) or None,
                         pipeline_tag="text-classification" if scalar else "text-generation")
    keys = [*(() if rl else SUPERVISED_CARD_KEYS), *spec.card_keys, *COMMON_KEYS]
    if not lora:
        keys = [k for k in keys if not k.startswith("lora.")]
    rows = [f"| `{k}` | {ran.get(k) or _value(settings[k])} |" for k in keys if k in settings]
    final = _final_metrics(metrics)
    what = "the critic (value model) trained beside the policy" if role == "critic" else description(stage)
    path = str(out)
    if scalar:
        load = (f"from transformers import AutoModelForSequenceClassification, AutoTokenizer\n\n"
                f"model = AutoModelForSequenceClassification.from_pretrained({path!r}, num_labels=1)\n"
                f"tokenizer = AutoTokenizer.from_pretrained({path!r})\n"
                f"# the score is the head's output at the last token minus model.config.score_offset")
        use = (f"As PPO's reward model: `tether ppo reward.models=[{path}]`." if role == "reward"
               else "It is the value model of the PPO run in the parent directory.")
    else:
        load = (f"from transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
                f"model = AutoModelForCausalLM.from_pretrained({path!r})\n"
                f"tokenizer = AutoTokenizer.from_pretrained({path!r})")
        use = f"Served with an OpenAI-compatible API: `tether serve --model {path}`."
    if lora:
        use += (" The checkpoint has the LoRA adapters merged in; `adapter/` holds the adapters alone "
                "(`peft.PeftModel.from_pretrained(base_model, 'adapter')`).")
    body = "\n".join([
        f"# {Path(out).resolve().name}",
        "",
        f"Trained with tether {tether.__version__}: {what}, "
        f"starting from `{source}`.",
        "",
        "## Training",
        "",
        f"Stage: `{stage}`{' (critic)' if role == 'critic' else ''}. The run's full resolved config is "
        f"`config.yaml` in its run directory; its curves are in `metrics.jsonl` (`tether report`).",
        "",
        "| setting | value |",
        "| --- | --- |",
        *rows,
        "",
        "## Results",
        "",
        *(["| metric | value |", "| --- | --- |", *[f"| `{k}` | {_value(v)} |" for k, v in final.items()]]
          if final else ["No held-out metrics were computed in this run."]),
        "",
        "## How to load",
        "",
        "```python",
        load,
        "```",
        "",
        use,
        "",
    ])
    return ModelCard(f"---\n{data.to_yaml()}\n---\n\n{body}").content
