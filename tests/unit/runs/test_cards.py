"""Model cards: the Hugging Face header (ModelCard.load parses it) and the body's facts."""

from __future__ import annotations

from huggingface_hub import ModelCard

import tether
from tether.runs.cards import base_model_of, model_card
from tether.config import RLConfig, RewardModelConfig, SFTConfig, from_dict


def card_of(text: str, tmp_path) -> ModelCard:
    path = tmp_path / "README.md"
    path.write_text(text, encoding="utf-8")
    return ModelCard.load(path)


def test_a_hub_model_and_hub_data_fill_the_header(tmp_path):
    cfg = from_dict(SFTConfig, {"model": {"name_or_path": "Qwen/Qwen2.5-0.5B"},
                                "data": {"train": "HuggingFaceH4/ultrachat_200k", "eval": "HuggingFaceH4/ultrachat_200k"},
                                "optim": {"lr": 2e-5}, "lora": {"r": 8}, "run": {"out": "runs/x"}})
    card = card_of(model_card(cfg, "sft", {"eval/loss": 1.25, "steps": 100, "time_s": 3.0, "engine": object()},
                              "runs/x"), tmp_path)
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B"
    assert card.data.datasets == ["HuggingFaceH4/ultrachat_200k"]
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "text-generation"
    assert card.data.tags == ["tether", "sft", "lora"]
    text = card.text
    assert f"tether {tether.__version__}" in text and "Stage: `sft`" in text
    assert "| `optim.lr` | 2e-05 |" in text and "| `lora.r` | 8 |" in text
    assert "| `eval/loss` | 1.25 |" in text and "| `steps` | 100 |" in text
    assert "time_s" not in text and "engine" not in text  # only held-out metrics and counts
    assert "adapter/" in text and "AutoModelForCausalLM.from_pretrained('runs/x')" in text


def test_local_files_are_not_listed_as_hub_datasets_and_a_local_model_without_card_has_no_base(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    data = tmp_path / "prefs.jsonl"
    data.write_text("")
    cfg = from_dict(RewardModelConfig, {"model": {"name_or_path": str(model)}, "data": {"train": str(data)}})
    card = card_of(model_card(cfg, "rm", {"eval/accuracy": 0.75}, tmp_path / "rm", role="reward"), tmp_path)
    assert card.data.base_model is None and card.data.datasets is None
    assert card.data.pipeline_tag == "text-classification" and "reward-model" in card.data.tags
    assert "| `lora.r` |" not in card.text  # LoRA off: not shown


def test_the_base_model_carries_down_a_chain_of_local_checkpoints(tmp_path):
    sft_dir = tmp_path / "sft"
    sft_dir.mkdir()
    sft_cfg = from_dict(SFTConfig, {"model": {"name_or_path": "meta-llama/Llama-3.2-1B"}, "data": {"train": "a/b"}})
    (sft_dir / "README.md").write_text(model_card(sft_cfg, "sft", {}, sft_dir))
    assert base_model_of(str(sft_dir)) == "meta-llama/Llama-3.2-1B"
    ppo_cfg = from_dict(RLConfig, {"model": {"name_or_path": str(sft_dir)}, "reward": {"models": ["org/rm"]},
                                     "prompts": "org/prompts"})
    card = card_of(model_card(ppo_cfg, "grpo", {"objective/kl": 1.5, "eval/gold_score": float("nan")},
                              tmp_path / "ppo"), tmp_path)
    assert card.data.base_model == "meta-llama/Llama-3.2-1B" and card.data.datasets == ["org/prompts"]
    assert "rlhf" in card.data.tags and "grpo" in card.data.tags
    assert "| `objective/kl` | 1.5 |" in card.text and "gold_score" not in card.text  # NaN left out
    assert "| `reward.models` | `org/rm` |" in card.text
    assert "| `group.size` | 1 |" in card.text  # null resolved: one response per prompt under ppo


def test_a_length_the_context_capped_shows_what_ran(tmp_path):
    from tether.loops.common import fit_to_context
    from tether.runs import capped_header

    class Config:  # a model config with 256 positions
        max_position_embeddings = 256

    cfg = from_dict(SFTConfig, {"model": {"name_or_path": "gpt2"}, "data": {"train": "a/b", "max_length": 512}})
    limits = {"data.max_length": fit_to_context(512, "data.max_length", {"gpt2": Config()})}
    text = card_of(model_card(cfg, "sft", {}, tmp_path / "sft", limits=limits), tmp_path).text
    assert "| `data.max_length` | 256 (capped from data.max_length=512: the context of the model 'gpt2' is 256 " \
           "positions) |" in text
    assert "| `data.max_length` | 512 |" not in text
    assert capped_header(limits).startswith("# ") and "#   data.max_length: 256 (capped" in capped_header(limits)
    uncapped = {"data.max_length": fit_to_context(128, "data.max_length", {"gpt2": Config()})}
    assert "| `data.max_length` | 512 |" in model_card(cfg, "sft", {}, tmp_path / "sft", limits=uncapped)
    assert capped_header(uncapped) == ""


def test_an_rl_card_shows_the_prompt_limit_that_ran(tmp_path):
    from tether.loops.common import LengthLimit

    cfg = from_dict(RLConfig, {"model": {"name_or_path": "org/m"}, "reward": {"models": ["org/rm"]},
                                "prompts": "org/prompts", "rollout": {"max_prompt_length": 256}})
    capped = {"rollout.max_prompt_length": LengthLimit(40, "capped from rollout.max_prompt_length=256: why")}
    assert "| `rollout.max_prompt_length` | 256 |" in model_card(cfg, "ppo", {}, tmp_path / "ppo")
    assert "| `rollout.max_prompt_length` | 40 (capped from rollout.max_prompt_length=256: why) |" in \
        model_card(cfg, "ppo", {}, tmp_path / "ppo", limits=capped)


def test_a_kto_card_names_the_method_and_its_weights(tmp_path):
    from tether.config import KTOConfig

    cfg = from_dict(KTOConfig, {"model": {"name_or_path": "org/m"}, "data": {"train": "org/kto"},
                                "kto": {"desirable_weight": 1.33}})
    card = card_of(model_card(cfg, "kto", {"eval/margin": 0.5}, tmp_path / "kto"), tmp_path)
    assert card.data.tags == ["tether", "kto"] and "KTO on responses labelled desirable or undesirable" in card.text
    assert "| `kto.beta` | 0.1 |" in card.text and "| `kto.desirable_weight` | 1.33 |" in card.text
    assert "| `kto.undesirable_weight` | 1 |" in card.text and "| `eval/margin` | 0.5 |" in card.text
