"""The multi-step demo task: ``what is ( a OP b ) OP c ?`` answered in two steps separated by ``;``,
with gold step labels, for process reward models (``tether prm``) against outcome reward models.

Modules: :mod:`.world` (problems, steps, gold labels, the demonstrators), :mod:`.judge` (process
gold and final-answer accuracy), :mod:`.tokenizer` and :mod:`.build` (:func:`build_task` writes the
task's files; the base model is arith's tiny Llama). ``build_task`` and ``build_tokenizer`` are
imported lazily so that loading the judge does not import transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from tether.tasks.steps.judge import gold_reward, gold_score, is_correct
from tether.tasks.steps.world import PROMPTS, SEPARATOR, correct_answer, parse_prompt, step_labels

JUDGE = "tether.tasks.steps.judge:gold_score"
REWARD = "tether.tasks.steps.judge:gold_reward"

_LAZY = {"build_task": "tether.tasks.steps.build", "build_tokenizer": "tether.tasks.steps.tokenizer"}

__all__ = ["JUDGE", "PROMPTS", "REWARD", "SEPARATOR", "build_task", "build_tokenizer", "correct_answer", "gold_reward",
           "gold_score", "is_correct", "parse_prompt", "step_labels"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
