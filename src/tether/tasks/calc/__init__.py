"""The tool-use demo task: two-digit times one-digit multiplication with a ``calculator`` tool.

Modules: :mod:`.world` (prompts, the tool's schema, calls and answers as words, the demonstrators),
:mod:`.tools` (``calculator``), :mod:`.judge` (the gold judge of the final answer), :mod:`.tokenizer`
(word-level, arith's with this world's words) and :mod:`.build` (:func:`build_task` writes the task's
files; the base model is arith's tiny Llama). docs/episodes.md, "The tool demo", runs it.

``build_task`` and ``build_tokenizer`` are imported lazily so that loading the judge or the tool
does not import transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

from tether.tasks.calc.judge import gold_reward, gold_score, is_correct
from tether.tasks.calc.tools import calculator
from tether.tasks.calc.world import PROMPTS, TOOL_SCHEMA, correct_answer, parse_prompt

JUDGE = "tether.tasks.calc.judge:gold_score"
REWARD = "tether.tasks.calc.judge:gold_reward"
TOOL = "tether.tasks.calc.tools:calculator"

_LAZY = {
    "build_task": "tether.tasks.calc.build",
    "build_tokenizer": "tether.tasks.calc.tokenizer",
}

__all__ = ["JUDGE", "PROMPTS", "REWARD", "TOOL", "TOOL_SCHEMA", "build_task", "build_tokenizer", "calculator",
           "correct_answer", "gold_reward", "gold_score", "is_correct", "parse_prompt"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
