"""Turn prompts and responses into token ids, with or without the tokenizer's chat template.

The chat template owns the special tokens at the start of a prompt (BOS), so a templated
prompt is never passed through the tokenizer's own special-token insertion a second time.
"""

from __future__ import annotations

from collections.abc import Mapping

from tether.data.schemas import Prompt
from tether.common.errors import ConfigError, DataError, ModelError

__all__ = ["use_chat_template", "encode_prompt", "encode_response", "prompt_text"]

_MODES = ("auto", "always", "never")


def _name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", None) or type(tokenizer).__name__


def use_chat_template(tokenizer, mode: str) -> bool:
    """``auto``: iff the tokenizer has a chat template; ``always``: required; ``never``: off."""
    if mode not in _MODES:
        raise ConfigError(f"chat template mode must be one of {', '.join(_MODES)}, got {mode!r}")
    has = bool(getattr(tokenizer, "chat_template", None))
    if mode == "always" and not has:
        raise ModelError(
            f"tokenizer {_name(tokenizer)} has no chat template; chat template mode 'always' needs one "
            "(use a chat/instruct tokenizer, set tokenizer.chat_template, or use mode 'auto' or 'never')"
        )
    return has if mode == "auto" else mode == "always"


def encode_prompt(prompt: Prompt, tokenizer, mode: str = "auto") -> list[int]:
    """Token ids of a prompt, ending where the model should start its response."""
    if isinstance(prompt, list):
        if mode not in _MODES:
            raise ConfigError(f"chat template mode must be one of {', '.join(_MODES)}, got {mode!r}")
        if mode == "never":
            raise ConfigError(
                "the dataset uses chat messages but chat template mode is 'never'; "
                "use mode 'auto' or 'always', or give prompts as plain strings"
            )
        if not getattr(tokenizer, "chat_template", None):
            raise ModelError(
                f"tokenizer {_name(tokenizer)} has no chat template, but the dataset uses chat messages; "
                "use a chat/instruct tokenizer, set tokenizer.chat_template, or give prompts as plain strings"
            )
        return _apply_template(prompt, tokenizer)
    if use_chat_template(tokenizer, mode):
        return _apply_template([{"role": "user", "content": prompt}], tokenizer)
    return list(tokenizer(prompt, add_special_tokens=True).input_ids)


def encode_chat(messages: list[dict], tokenizer, tools: list[dict] | None = None) -> list[int]:
    """(P,) ``messages`` rendered with the tokenizer's chat template and the generation prompt,
    offering ``tools`` (OpenAI-format schemas) to a template that renders them; a template that
    fails is a ModelError naming the tokenizer."""
    return _apply_template(messages, tokenizer, tools)


def _apply_template(messages: list[dict], tokenizer, tools: list[dict] | None = None) -> list[int]:
    try:
        out = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=True)
    except Exception as e:  # jinja errors raised by the template itself ("roles must alternate", ...)
        if isinstance(e, (DataError, ModelError)):
            raise
        raise ModelError(
            f"the chat template of tokenizer {_name(tokenizer)} failed on a prompt "
            f"({type(e).__name__}: {e}); check the roles and order of the prompt messages"
        ) from None
    return _as_ids(out)


def _as_ids(out) -> list[int]:
    """Normalise apply_chat_template output (list, BatchEncoding/dict, tensor, batch of one) to list[int]."""
    if isinstance(out, Mapping) or hasattr(out, "input_ids"):
        out = out["input_ids"]
    if hasattr(out, "tolist"):
        out = out.tolist()
    out = list(out)
    if out and isinstance(out[0], (list, tuple)):
        if len(out) != 1:
            raise ValueError(f"expected token ids for one prompt, got a batch of {len(out)}")
        out = list(out[0])
    return [int(t) for t in out]


def encode_response(text: str, tokenizer) -> list[int]:
    """Response token ids (no special tokens) followed by EOS."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise ModelError(
            f"tokenizer {_name(tokenizer)} has no EOS token (eos_token_id is None); responses must end with EOS "
            "so the model learns to stop: set tokenizer.eos_token"
        )
    return list(tokenizer(text, add_special_tokens=False).input_ids) + [int(eos)]


def prompt_text(prompt: Prompt) -> str:
    """Plain text of a prompt for judges and logs: the string, or the last user message's content."""
    if isinstance(prompt, str):
        return prompt
    for m in reversed(prompt):
        if m.get("role") == "user":
            return m.get("content", "")
    return prompt[-1].get("content", "") if prompt else ""
