"""Checks of a final model directory's model card (README.md), parsed with huggingface_hub."""

from __future__ import annotations

from pathlib import Path

import tether


def assert_model_card(out: Path, stage: str, role: str = "policy", metric: str | None = None):
    """``out/README.md`` parses with ``ModelCard.load`` and says what made the model; returns the card."""
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "transformers"
    assert "tether" in card.data.tags and stage in card.data.tags
    assert card.data.pipeline_tag == ("text-generation" if role == "policy" else "text-classification")
    assert f"tether {tether.__version__}" in card.text and f"Stage: `{stage}`" in card.text
    loader = "AutoModelForCausalLM" if role == "policy" else "AutoModelForSequenceClassification"
    assert f"{loader}.from_pretrained({str(out)!r}" in card.text
    if metric is not None:
        assert f"| `{metric}` |" in card.text, card.text
    assert "README.md" in (out / "tether_checkpoint.json").read_text()  # part of the complete checkpoint
    return card
