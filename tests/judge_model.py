"""A tiny Qwen2 judge that has learned one verdict by heart, for the judge reward's end-to-end tests:
asked anything in the chat format, it answers (greedily) ``Score: 8``. Heads of 32 dimensions (vLLM's CPU attention takes no smaller). Its tokenizer is the tool
model's byte-level BPE with a ChatML template (tests/tool_model.py), so `tether serve`
and vLLM's OpenAI server render the prompts it learned. A constant verdict is what a transport test
needs: every parsed score is 8, so a run's reward/<name> says the answers came through unchanged.
Nothing is downloaded; building takes seconds."""

from __future__ import annotations

from pathlib import Path

import torch
from tool_model import TEMPLATE, learn_by_heart, tiny_qwen2

VERDICT = "Score: 8"
RUBRIC = "Grade this answer.\nQ: {prompt}\nA: {response}\n"
SEEN = [("what is 3 + 4 ?", "7"), ("what is 2 times 6 ?", "the answer is 12 !"), ("what is 9 - 1 ?", "8 ."),
        ("what is 5 + 5 ?", "ten"), ("what is 7 times 3 ?", "21 ! 21 !"), ("what is 8 - 6 ?", ""),
        ("what is 4 + 1 ?", "5 5 5 5 5 5"), ("what is 6 times 6 ?", "sure . 36")]
HELD_OUT = [("what is 1 + 1 ?", "2 !"), ("what is 3 times 3 ?", "nine . ok")]


def _examples(tok, pairs) -> list[tuple[torch.Tensor, int]]:
    out = []
    for prompt, response in pairs:
        filled = RUBRIC.replace("{prompt}", prompt).replace("{response}", response)
        ids = list(tok.apply_chat_template([{"role": "user", "content": filled}], add_generation_prompt=True,
                                           tokenize=True, return_dict=False))
        target = tok.encode(VERDICT, add_special_tokens=False) + [tok.eos_token_id]
        out.append((torch.tensor(ids + target), len(ids)))
    return out


def build(out: Path, max_steps: int = 800) -> Path:
    """Train the judge to answer ``VERDICT`` to its rubric's prompts and save it with its tokenizer in ``out``."""
    tok, model = tiny_qwen2(out, [TEMPLATE, RUBRIC, VERDICT, "0123456789 + - times ? ! . answer sure ok"], heads=2,
                            kv_heads=1)
    learn_by_heart(model, _examples(tok, SEEN), max_steps, "the tiny judge", checked=_examples(tok, HELD_OUT))
    model.save_pretrained(out)
    return out
