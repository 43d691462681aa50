"""Prompt + ``--max-new-tokens`` within the models' context, for the commands that sample a
frozen policy from a prompt file (`tether eval`, `tether pairs`).

A learned position table fails past its end (GPT-2: an IndexError deep in the model, after
every earlier prompt was sampled) and rotary positions were never trained there, so the limit
is checked first: ``--max-new-tokens`` against the smallest context, from the models' configs
before any weights, then each prompt once it is tokenized.
"""

from __future__ import annotations

from tether.common.errors import ConfigError
from tether.common.outputs import shown

Context = tuple[int, str]  # (positions, whose: "the policy 'PATH'")


def smallest_context(models: list[tuple[str, str, str]]) -> Context | None:
    """The smallest context (positions) of ``models`` — (role, flag, path) each, e.g.
    ("policy", "--policy", "runs/ppo") — read from their configs, and whose it is; None when no
    config gives one."""
    from tether.models import context_length
    from tether.models.loading import load_model_config

    best = None
    for role, flag, path in models:
        limit = context_length(load_model_config(path, key=flag))
        if limit is not None and (best is None or limit < best[0]):
            best = (limit, f"the {role} '{shown(path)}'")
    return best


def check_new_tokens(max_new_tokens: int, context: Context | None) -> None:
    """``--max-new-tokens`` leaves room for at least one prompt token in ``context``."""
    if context is not None and max_new_tokens >= context[0]:
        raise ConfigError(f"--max-new-tokens must be below the {context[0]}-token context of {context[1]} "
                          f"(prompt + response must fit), got {max_new_tokens}.")


def check_lengths(examples, ids: list[list[int]], max_new_tokens: int, context: Context | None) -> None:
    """Every prompt + ``--max-new-tokens`` within ``context``; names the file and row."""
    if context is None:
        return
    limit, whose = context
    for ex, prompt in zip(examples, ids):
        n = len(prompt)
        if n + max_new_tokens > limit:
            fix = (f"lower --max-new-tokens to at most {limit - n}, or shorten the prompt" if n < limit
                   else "the prompt alone fills the context; shorten or remove it")
            raise ConfigError(
                f"{ex.source}, row {ex.row}: the prompt is {n} tokens and --max-new-tokens is {max_new_tokens}: "
                f"{n + max_new_tokens} tokens, past the {limit}-token context of {whose}; expected "
                f"prompt + --max-new-tokens <= {limit} ({fix})."
            )


def checked_prompts(args, context: Context | None, tokenizer_path, tokenizer_key: str, purpose: str):
    """The tokenizer, the prompt rows of ``args.prompts`` (at most ``args.max_prompts``) and their
    token ids, every length checked against ``context`` before any weights load. ``purpose``
    finishes the empty-file error: "no prompts to {purpose}"."""
    from tether.data import encode_prompt, load_records, prompt_examples
    from tether.common.errors import DataError, TetherError
    from tether.models import load_tokenizer

    examples = prompt_examples(load_records(args.prompts, key="--prompts"))[: args.max_prompts]
    if not examples:
        raise DataError(f"{args.prompts}: no prompts to {purpose}; expected at least one row.")
    check_new_tokens(args.max_new_tokens, context)
    tokenizer = load_tokenizer(tokenizer_path, key=tokenizer_key)
    ids = []
    for ex in examples:
        try:
            ids.append(encode_prompt(ex.prompt, tokenizer))
        except TetherError as err:
            raise type(err)(f"{ex.source}, row {ex.row}: {err}") from None
    check_lengths(examples, ids, args.max_new_tokens, context)
    return tokenizer, examples, ids
