"""Tokenize validated examples to fixed-length limits and collate them into padded batches."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tether.data.schemas import PreferenceExample, SFTExample, UnpairedExample
from tether.data.templates import encode_prompt, encode_response
from tether.common.errors import DataError, TetherError

__all__ = [
    "TokenizedSFT",
    "TokenizedPreference",
    "TokenizedUnpaired",
    "tokenize_sft",
    "tokenize_preference",
    "tokenize_unpaired",
    "collate_right",
    "collate_left",
]

_ON_LONG = ("truncate", "drop", "error")


@dataclass
class TokenizedSFT:
    input_ids: list[int]
    loss_mask: list[int]  # 1 on response tokens (incl. EOS), 0 on prompt tokens
    truncated: bool = False  # the response was cut to fit max_length (on_long='truncate')


@dataclass
class TokenizedPreference:
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    truncated: bool = False  # the responses were cut to fit max_length (on_long='truncate')


@dataclass
class TokenizedUnpaired:
    """A KTO row: a prompt and one response, desirable or not; ``pair``: as in
    :class:`~tether.data.schemas.UnpairedExample`. ``kl_prompt_ids`` / ``kl_completion_ids``: the
    mismatched pair KTO's reference point is estimated on (another row's prompt, this row's
    response cut to fit), filled in once every row is read (:mod:`tether.objectives.kto`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    desirable: bool
    pair: int | None = None
    truncated: bool = False  # the response was cut to fit max_length (on_long='truncate')
    kl_prompt_ids: list[int] | None = None
    kl_completion_ids: list[int] | None = None


def _check_args(max_length: int, on_long: str) -> None:
    if on_long not in _ON_LONG:
        raise ValueError(f"on_long must be one of {', '.join(_ON_LONG)}, got {on_long!r}")
    if not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive integer, got {max_length!r}")


def _encode(ex, tokenizer, mode: str, *responses: str) -> list[list[int]]:
    """Prompt ids then response ids; tokenizer/template errors are re-raised naming source and row."""
    try:
        return [encode_prompt(ex.prompt, tokenizer, mode)] + [encode_response(r, tokenizer) for r in responses]
    except TetherError as e:
        raise type(e)(f"{ex.source}, row {ex.row}: {e}") from None


def _too_long(ex, what: str, max_length: int, capped_by: str | None) -> DataError:
    if capped_by:
        return DataError(
            f"{ex.source}, row {ex.row}: {what}, longer than max_length {max_length} ({capped_by}); "
            "expected it to fit (shorten the row, or set data.on_long to 'truncate' or 'drop')"
        )
    return DataError(
        f"{ex.source}, row {ex.row}: {what}, longer than max_length {max_length}; "
        "expected it to fit (raise data.max_length, shorten the row, or set data.on_long to 'truncate' or 'drop')"
    )


def tokenize_sft(
    ex: SFTExample, tokenizer, max_length: int, mode: str = "auto", on_long: str = "truncate",
    capped_by: str | None = None,
) -> TokenizedSFT | None:
    """Prompt + response ids with a response-only loss mask; ``None`` if the example is dropped.

    Too long: ``truncate`` keeps the prompt and cuts the end of the response (dropping the
    example if the prompt alone fills ``max_length``), ``drop`` returns None, ``error`` raises.
    ``capped_by``: why ``max_length`` is less than ``data.max_length`` (the model's context), for errors.
    """
    _check_args(max_length, on_long)
    p, r = _encode(ex, tokenizer, mode, ex.completion)
    if len(p) + len(r) > max_length:
        if on_long == "error":
            raise _too_long(ex, f"field 'completion': prompt + response is {len(p) + len(r)} tokens "
                                f"({len(p)} + {len(r)})", max_length, capped_by)
        if on_long == "drop" or len(p) >= max_length:
            return None
        r = r[: max_length - len(p)]
        return TokenizedSFT(input_ids=p + r, loss_mask=[0] * len(p) + [1] * len(r), truncated=True)
    return TokenizedSFT(input_ids=p + r, loss_mask=[0] * len(p) + [1] * len(r))


def tokenize_preference(
    ex: PreferenceExample, tokenizer, max_length: int, mode: str = "auto", on_long: str = "drop",
    capped_by: str | None = None,
) -> TokenizedPreference | None:
    """Prompt, chosen and rejected ids; the length checked is prompt + the longer response.

    ``truncate`` cuts both responses to fit (dropping the pair if the prompt alone fills
    ``max_length`` or if the cut responses become identical).
    """
    _check_args(max_length, on_long)
    p, c, r = _encode(ex, tokenizer, mode, ex.chosen, ex.rejected)
    longest = max(len(c), len(r))
    if len(p) + longest > max_length:
        if on_long == "error":
            raise _too_long(ex, f"fields 'chosen'/'rejected': prompt + longer response is {len(p) + longest} tokens "
                                f"({len(p)} + {longest})", max_length, capped_by)
        if on_long == "drop" or len(p) >= max_length:
            return None
        room = max_length - len(p)
        c, r = c[:room], r[:room]
        if c == r:
            return None
        return TokenizedPreference(prompt_ids=p, chosen_ids=c, rejected_ids=r, truncated=True)
    return TokenizedPreference(prompt_ids=p, chosen_ids=c, rejected_ids=r)


def tokenize_unpaired(
    ex: UnpairedExample, tokenizer, max_length: int, mode: str = "auto", on_long: str = "drop",
    capped_by: str | None = None,
) -> TokenizedUnpaired | None:
    """Prompt and response ids of a KTO row; ``None`` if it is dropped. Too long: as
    :func:`tokenize_sft` (``truncate`` cuts the end of the response)."""
    _check_args(max_length, on_long)
    p, r = _encode(ex, tokenizer, mode, ex.completion)
    if len(p) + len(r) > max_length:
        field = "completion" if ex.pair is None else ("chosen" if ex.desirable else "rejected")
        if on_long == "error":
            raise _too_long(ex, f"field '{field}': prompt + response is {len(p) + len(r)} tokens "
                                f"({len(p)} + {len(r)})", max_length, capped_by)
        if on_long == "drop" or len(p) >= max_length:
            return None
        return TokenizedUnpaired(p, r[: max_length - len(p)], ex.desirable, ex.pair, truncated=True)
    return TokenizedUnpaired(p, r, ex.desirable, ex.pair)


def _padded(seqs: list[list[int]], pad: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if not seqs:
        raise ValueError("cannot collate an empty batch")
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    attn = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if not s:
            continue
        cols = slice(width - len(s), width) if left else slice(0, len(s))
        ids[i, cols] = torch.as_tensor(s, dtype=torch.long)
        attn[i, cols] = 1
    return ids, attn


def collate_right(seqs: list[list[int]], pad_id: int, masks: list[list[int]] | None = None) -> dict:
    """Right-padded batch for training: ``input_ids``, ``attention_mask`` and, with masks, ``loss_mask``."""
    ids, attn = _padded(seqs, pad_id, left=False)
    out = {"input_ids": ids, "attention_mask": attn}
    if masks is not None:
        if len(masks) != len(seqs) or any(len(m) != len(s) for m, s in zip(masks, seqs)):
            raise ValueError("masks must match seqs in number and in length of each sequence")
        out["loss_mask"] = _padded(masks, 0, left=False)[0]
    return out


def collate_left(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded ``(input_ids, attention_mask)`` for generation."""
    return _padded(seqs, pad_id, left=True)
