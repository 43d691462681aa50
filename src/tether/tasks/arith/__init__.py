"""The embedded demo task: single-digit arithmetic chat with a biased annotator.

Modules: :mod:`.world` (prompts, parsing, response samplers), :mod:`.judge`
(hidden gold judge, biased annotator utility), :mod:`.verify` (a verifiable answer
reward), :mod:`.tokenizer` (word-level tokenizer), :mod:`.model` (tiny random-init Llama), :mod:`.build`
(:func:`build_task` writes everything the pipeline consumes).

``build_task``, ``build_tokenizer`` and ``build_base_model`` are imported lazily
so that loading the judge does not import transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from tether.tasks.arith.judge import annotator_utility, gold_score, is_correct
from tether.tasks.arith.world import PROMPTS, correct_answer, parse_prompt

JUDGE = "tether.tasks.arith.judge:gold_score"

_LAZY = {
    "build_task": "tether.tasks.arith.build",
    "build_tokenizer": "tether.tasks.arith.tokenizer",
    "build_base_model": "tether.tasks.arith.model",
}

__all__ = [
    "JUDGE",
    "PROMPTS",
    "annotator_utility",
    "build_base_model",
    "build_task",
    "build_tokenizer",
    "correct_answer",
    "gold_score",
    "is_correct",
    "parse_prompt",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
