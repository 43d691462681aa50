"""Forward passes that compute only what RLHF needs.

The LM head runs only at response positions (a causal LM's head over prompt positions is
wasted work), and position ids come from the attention mask so that a left-padded batch
gets the same positions as ``generate`` gave it. Leading columns that are padding in every
row of a (sub-)batch are dropped before the model sees them: the real tokens' positions and
attention are unchanged, so the result is the same, for less work.

A batch with padding runs padding-free where the model allows it (:mod:`tether.models.packing`):
its real tokens packed into one sequence, the outputs scattered back to the padded positions,
so callers see the same shapes and values; the LM head then runs at real positions only.

``autocast="bf16"`` (or "fp16") runs the decoder trunk under autocast (the weights stay fp32);
the LM head and scalar heads, the log-softmax and everything after stay fp32 (and so does the
lean decode loop's LM head, so that captured log-probs match these).
"""

from __future__ import annotations

import contextlib
import weakref

import torch
import torch.utils.checkpoint
from torch import Tensor

from tether.algos.logprobs import token_logprobs
from tether.algos.losses import entropy_from_logits
from tether.models import last_layer, packing
from tether.models.loading import score_head
from tether.models.lora import unwrap
from tether.common.runtime import AUTOCAST_DTYPES

def autocast_context(model, mode: str = "none"):
    """``torch.autocast`` at ``mode`` ("none"/"fp32", "bf16" or "fp16") on the model's device, or a no-op."""
    if mode in (None, "none", "fp32"):
        return contextlib.nullcontext()
    device = next(model.parameters()).device.type
    return torch.autocast(device, dtype=AUTOCAST_DTYPES[mode])


def position_ids(attention_mask: Tensor) -> Tensor:
    """(B, T) positions counting real tokens only: left padding does not shift them."""
    return (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)


def leading_padding(attention_mask: Tensor, limit: int | None = None) -> int:
    """Number of leading columns that are padding in every row (at most ``limit``)."""
    limit = attention_mask.shape[1] if limit is None else limit
    real = attention_mask[:, :limit].bool().any(dim=0)
    if not bool(real.any()):
        return limit
    return int(real.long().argmax())


# A cache, not a verdict: trunk -> {mode: its torch.compile'd module}. Not on the model itself:
# an nn.Module attribute holding a module would register it as a submodule (and save it).
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


COMPILE_MODES = {"default": None, "max-autotune": "max-autotune-no-cudagraphs"}


def compiled_trunk(model, mode: str = "default"):
    """``torch.compile`` of the model's decoder trunk (shared weights), built once per model and mode.

    Dynamic shapes: one compilation serves every batch size and sequence length.
    ``mode="max-autotune"``: inductor also benchmarks its own GEMM kernels against ATen's and keeps
    the faster (on CPU, C++ GEMM templates; longer compilation). No CUDA graphs either way.
    """
    trunk = unwrap(model).base_model
    cache = _COMPILED.setdefault(trunk, {})
    fn = cache.get(mode)
    if fn is None:
        fn = torch.compile(trunk, dynamic=True, mode=COMPILE_MODES[mode])
        cache[mode] = fn
    return fn


def _trunk_kwargs(input_ids: Tensor, attention_mask: Tensor) -> dict:
    """A decoder trunk's inputs for one cache-free pass, positions counted over real tokens."""
    return dict(input_ids=input_ids, attention_mask=attention_mask,
                position_ids=position_ids(attention_mask), use_cache=False)


def packs(model, attention_mask: Tensor, compile: bool | str = False) -> bool:
    """Whether a pass of ``model`` over a (B, T) batch with this mask runs packed: the batch has
    padding, ``model.padding_free`` is on, the pass is not compiled (a compiled trunk keeps its
    padded shapes) and the model passed :func:`check_packing`, which runs at its first pass
    whatever the batch (under data parallel every rank then checks at the same pass: the check's
    forwards are collectives under FSDP)."""
    model = unwrap(model)
    if (compile and torch.is_grad_enabled()) or not packing.padding_free(model):
        return False
    decided = packing.verdict(model)
    ok = decided[0] if decided is not None else check_packing(model)
    return ok and not bool(attention_mask.all())


#: The rows :func:`check_packing` runs by default: left padding, right padding, none.
PROBE_MASK = ((0, 1, 1, 1, 1, 1), (1, 1, 0, 0, 0, 0), (0, 0, 1, 1, 1, 1), (1, 1, 1, 1, 1, 1))


def check_packing(model, attention_mask: Tensor | None = None) -> bool:
    """Decide once whether ``model`` packs: its config allows it (:func:`tether.models.packing.static_reason`)
    and its packed trunk matches its padded trunk (no gradients, no autocast, random token ids)
    at the real tokens of ``attention_mask``'s rows (default :data:`PROBE_MASK`)."""
    model = unwrap(model)
    reason = packing.static_reason(model)
    if reason is not None:
        return packing.decide(model, False, reason)
    first = next(model.parameters())
    mask = torch.tensor(PROBE_MASK) if attention_mask is None else attention_mask
    mask = mask.to(first.device)
    vocab = model.get_input_embeddings().weight.shape[0]
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, mask.shape, generator=generator).to(mask.device)
    # Eval mode: no dropout, so the two forwards compare and no random draw of the run is consumed
    # (a resumed run checks at another step than the uninterrupted one).
    was_training = model.training
    model.eval()
    with torch.no_grad(), torch.autocast(first.device.type, enabled=False):
        padded = model.base_model(**_trunk_kwargs(ids, mask)).last_hidden_state.float()
        original = None
        try:
            original = packing.use_packed_attention(model)
            rows = packing.pack_rows(mask)
            out = _packed_trunk(model, ids, rows)
            error = None
        except Exception as err:  # a model whose forward cannot take packed rows
            error = f"its packed forward failed: {type(err).__name__}: {err}"
        finally:
            model.train(was_training)
    real = mask.bool()
    if error is None and not _close(rows.unpack(out)[real], padded[real], first.dtype):
        error = "its packed forward did not match its padded forward (its attention does not keep rows apart)"
    if error is not None and original is not None:
        model.set_attn_implementation(original)
    return packing.decide(model, error is None, error or "")


#: Largest |packed - padded| of the check, relative to the padded output's largest value, by the
#: weights' dtype: float noise passes (a half-precision model's rounding included); a row seeing
#: another row's tokens does not.
PACKING_TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-6, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _close(packed: Tensor, padded: Tensor, dtype: torch.dtype) -> bool:
    scale = max(float(padded.abs().max()), 1.0) if padded.numel() else 1.0
    return bool(packed.isfinite().all()) and float((packed - padded).abs().max()) <= PACKING_TOLERANCE.get(dtype, 1e-4) * scale


def _packed_trunk(model, input_ids: Tensor, rows: packing.PackedRows, autocast: str = "none",
                  kept: Tensor | None = None) -> Tensor:
    """The trunk over a (B, T) batch's real tokens packed into one sequence (``rows``): the (N, H)
    fp32 hidden states, or (K', H) at the ``kept`` packed positions when the model's last layer
    runs there only (:mod:`tether.models.last_layer`)."""
    trunk = model.base_model
    kwargs = dict(input_ids=rows.gather(input_ids), position_ids=rows.position_ids, use_cache=False,
                  **packing.pass_kwargs(model, rows))
    trim = kept[None] if kept is not None else None
    if trim is not None and last_layer.needs_check(model):
        last_layer.check(model, lambda: trunk(**kwargs).last_hidden_state.float(), trim)
    with autocast_context(model, autocast), last_layer.last_layer_at(model, trim):
        return trunk(**kwargs).last_hidden_state.float()[0]


def _kept_count(keep: slice | Tensor, length: int) -> int:
    return keep.shape[1] if isinstance(keep, Tensor) else len(range(length)[keep])


def hidden_states(model, input_ids: Tensor, attention_mask: Tensor, autocast: str = "none",
                  compile: bool | str = False, keep: slice | Tensor | None = None) -> Tensor:
    """Final hidden states of the decoder trunk (no LM or scalar head), fp32.

    (B, T, H), or (B, K, H) at ``keep`` (a slice of positions or (B, K) positions per row):
    then the last decoder layer runs at those positions only where the model allows it
    (:mod:`tether.models.last_layer`), and the full output is sliced otherwise.
    A batch with padding runs packed where :func:`packs` says so: padding positions then hold
    zeros. ``compile``: run the trunk through :func:`compiled_trunk` when gradients are on (the
    update); no-grad passes stay eager, so scoring never waits for a second compilation. ``True``
    or a mode of :data:`COMPILE_MODES`. Compiled passes run every layer in full, padded.
    """
    model = unwrap(model)  # a LoRA model runs as its base with the adapters injected
    if packs(model, attention_mask, compile):
        rows = packing.pack_rows(attention_mask)
        if keep is None:
            return rows.unpack(_packed_trunk(model, input_ids, rows, autocast))
        kept, where = rows.kept(keep)
        out = _packed_trunk(model, input_ids, rows, autocast, kept)
        if out.shape[0] == rows.tokens:  # the last layer ran everywhere
            out = out[kept]
        return rows.scatter_kept(out, where, _kept_count(keep, input_ids.shape[1]))
    trunk = model.base_model
    compiled = bool(compile) and torch.is_grad_enabled()
    if compiled:
        # Contiguous inputs: a sliced batch's strides and offset would each trigger a recompilation.
        mode = compile if isinstance(compile, str) else "default"
        trunk, input_ids, attention_mask = compiled_trunk(model, mode), input_ids.contiguous(), attention_mask.contiguous()
    kwargs = _trunk_kwargs(input_ids, attention_mask)
    trim = keep if (keep is not None and not compiled) else None
    if trim is not None:
        check_last_layer(model, input_ids, attention_mask, trim)
    with autocast_context(model, autocast), last_layer.last_layer_at(model, trim):
        out = trunk(**kwargs).last_hidden_state.float()
    if keep is not None and out.shape[1] == input_ids.shape[1]:
        out = last_layer.take_positions(out, keep)
    return out


def check_last_layer(model, input_ids: Tensor, attention_mask: Tensor, keep: slice | Tensor) -> None:
    """Before ``model``'s first trimmed pass: :func:`tether.models.last_layer.check` on this batch (fp32).

    Every pass that could trim calls this first, so whether a pass trims never depends on
    which pass came first (a resumed run trims exactly where the uninterrupted one did).
    """
    model = unwrap(model)
    if not last_layer.needs_check(model):
        return
    kwargs = _trunk_kwargs(input_ids, attention_mask)
    last_layer.check(model, lambda: model.base_model(**kwargs).last_hidden_state.float(), keep)


def _head(layer: torch.nn.Module, hidden: Tensor) -> Tensor:
    """A linear head in the weights' precision (fp32 master weights: fp32) with autocast off:
    log-probs and scores keep full precision whatever the trunk ran in."""
    with torch.autocast(hidden.device.type, enabled=False):
        return layer(hidden.to(layer.weight.dtype))


def scalar_head(layer: torch.nn.Module, hidden: Tensor) -> Tensor:
    """A (H -> 1) head on (..., H) hidden states, in fp32: (...)."""
    return _head(layer, hidden).squeeze(-1).float()


def response_hidden(model, sequences: Tensor, attention_mask: Tensor, num_prompt_tokens: int,
                    autocast: str = "none", compile: bool | str = False) -> tuple[Tensor, Tensor]:
    """(B, A, H) final hidden states where each response token is predicted, and its (B, A) ids.

    sequences, attention_mask: (B, T) with the first ``num_prompt_tokens`` the prompt, A = T - P.
    Position t predicts token t+1: response token j is read at P - 1 + j.
    """
    # Keep at least the last prompt column: it predicts the first response token.
    cut = min(leading_padding(attention_mask, num_prompt_tokens), num_prompt_tokens - 1)
    sequences, attention_mask, num_prompt_tokens = sequences[:, cut:], attention_mask[:, cut:], num_prompt_tokens - cut
    keep = slice(num_prompt_tokens - 1, sequences.shape[1] - 1)
    hidden = hidden_states(model, sequences, attention_mask, autocast, compile, keep)
    return hidden, sequences[:, num_prompt_tokens:]


#: fp32 elements of one chunk of logits: the LM head and its log-softmax run on at most this many
#: (positions × vocabulary) at a time, so their [positions, V] buffers stay bounded (128 MB each;
#: a 151,936-token vocabulary gives 220 positions a chunk).
LOGPROB_CHUNK_ELEMENTS = 2**25


def logprob_chunk(vocab: int, elements: int = LOGPROB_CHUNK_ELEMENTS) -> int:
    """Positions per chunk of :func:`logprobs_from_hidden` for a ``vocab``-token head."""
    return max(1, elements // max(vocab, 1))


def _head_logprobs(layer, hidden: Tensor, tokens: Tensor, temperature: float,
                   with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    logits = _head(layer, hidden).float() / temperature
    logp = token_logprobs(logits, tokens)
    return logp, entropy_from_logits(logits) if with_entropy else None


def logprobs_from_hidden(model, hidden: Tensor, tokens: Tensor, temperature: float = 1.0,
                         with_entropy: bool = False, chunk: int | None = None,
                         where: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
    """The LM head on (B, A, H) hidden states: log-probs of (B, A) ``tokens`` (and entropies).

    ``where``: (B, A) bool, the positions to compute (the real ones of a packed pass); the others
    read 0, and the head never runs on them.

    The head runs on ``chunk`` positions at a time (default :func:`logprob_chunk` of the head's
    vocabulary; 0: all at once): each chunk's fp32 logits are dropped once its log-probs are
    taken, and with gradients recomputed in the backward (:func:`torch.utils.checkpoint.checkpoint`),
    so the [positions, V] buffers never exceed one chunk. Each position's result is the same
    computation as unchunked.
    """
    batch, length = tokens.shape
    if where is not None:
        return logprobs_at(model, hidden[where], tokens[where], where, temperature, with_entropy, chunk)
    layer = unwrap(model).get_output_embeddings()
    chunk = logprob_chunk(layer.weight.shape[0]) if chunk is None else chunk
    if not chunk or batch * length <= chunk:
        return _head_logprobs(layer, hidden, tokens, temperature, with_entropy)
    flat_hidden, flat_tokens = hidden.reshape(batch * length, -1), tokens.reshape(batch * length)
    recompute = torch.is_grad_enabled() and (hidden.requires_grad or layer.weight.requires_grad)
    parts = []
    for start in range(0, batch * length, chunk):
        args = (layer, flat_hidden[start:start + chunk, None], flat_tokens[start:start + chunk, None], temperature,
                with_entropy)
        parts.append(torch.utils.checkpoint.checkpoint(_head_logprobs, *args, use_reentrant=False) if recompute
                     else _head_logprobs(*args))
    logp = torch.cat([p[0] for p in parts]).reshape(batch, length)
    return logp, torch.cat([p[1] for p in parts]).reshape(batch, length) if with_entropy else None


def logprobs_at(model, hidden: Tensor, tokens: Tensor, where: Tensor, temperature: float = 1.0,
                with_entropy: bool = False, chunk: int | None = None) -> tuple[Tensor, Tensor | None]:
    """The LM head on (K, H) hidden states only: log-probs of (K,) ``tokens`` (and entropies), placed
    at the K true positions of the (B, A) bool ``where`` (row-major), zeros elsewhere."""
    logp, entropy = logprobs_from_hidden(model, hidden[None], tokens[None], temperature, with_entropy, chunk)
    index = where.reshape(-1).nonzero().squeeze(1)

    def spread(x):  # (1, K) -> (B, A)
        return x.new_zeros(where.numel()).index_put((index,), x[0]).reshape(where.shape)

    return spread(logp), spread(entropy) if entropy is not None else None


def sequence_logprobs(model, input_ids: Tensor, attention_mask: Tensor, autocast: str = "none",
                      chunk: int | None = None) -> Tensor:
    """(B, T-1) log-probs of each next token (position t predicts token t+1), as SFT's loss reads
    them from ``model(...).logits``, but with the LM head in fp32 :func:`logprobs_from_hidden`
    chunks: no [B, T, V] logits (2.5 GB in fp32 for 8 × 512 tokens of a 151,936-token vocabulary).
    A packed pass runs the head only where a real token predicts a real token; the rest read 0."""
    lm = unwrap(model)
    if packs(lm, attention_mask):
        rows = packing.pack_rows(attention_mask)
        hidden = _packed_trunk(lm, input_ids, rows, autocast)  # (N, H)
        slots = rows.slot.view(input_ids.shape)
        current, target = slots[:, :-1], slots[:, 1:]  # (B, T-1) packed positions, -1 on padding
        where = (current >= 0) & (target >= 0)  # a real token predicts a real token
        return logprobs_at(model, hidden[current[where]], input_ids[:, 1:][where], where, chunk=chunk)[0]
    hidden = hidden_states(model, input_ids, attention_mask, autocast)[:, :-1]
    return logprobs_from_hidden(model, hidden, input_ids[:, 1:], chunk=chunk)[0]


def response_logprobs(
    model,
    sequences: Tensor,
    attention_mask: Tensor,
    num_prompt_tokens: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    autocast: str = "none",
    compile: bool | str = False,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of the response tokens.

    sequences, attention_mask: (B, T) with the first ``num_prompt_tokens`` the prompt.
    Returns logp (B, A) and entropy (B, A) or None, where A = T - num_prompt_tokens.
    Logits are divided by ``temperature`` so the log-probs describe the sampling distribution.
    """
    hidden, tokens = response_hidden(model, sequences, attention_mask, num_prompt_tokens, autocast, compile)
    return logprobs_from_hidden(model, hidden, tokens, temperature, with_entropy,
                                where=response_positions(model, attention_mask, num_prompt_tokens, compile))


def response_positions(model, attention_mask: Tensor, num_prompt_tokens: int,
                       compile: bool | str = False) -> Tensor | None:
    """(B, A) the real response tokens, where a packed pass runs the LM head; None for a padded
    pass (the head runs on the whole (B, A) block, as it always has)."""
    return attention_mask[:, num_prompt_tokens:].bool() if packs(model, attention_mask, compile) else None


def scalar_outputs(model, sequences: Tensor, attention_mask: Tensor, autocast: str = "none") -> Tensor:
    """(B, T) the scalar head at every position of a ``*ForSequenceClassification`` model."""
    return scalar_head(score_head(model), hidden_states(model, sequences, attention_mask, autocast))


def response_values(model, sequences: Tensor, attention_mask: Tensor, num_prompt_tokens: int,
                    autocast: str = "none", compile: bool | str = False) -> Tensor:
    """(B, A) the scalar head where each response token is predicted (positions P-1 .. T-2)."""
    hidden, _ = response_hidden(model, sequences, attention_mask, num_prompt_tokens, autocast, compile)
    return scalar_head(score_head(model), hidden)


def last_token_scores(model, sequences: Tensor, attention_mask: Tensor, autocast: str = "none") -> Tensor:
    """(B,) the scalar head at the last real token of each row (any padding side)."""
    cut = min(leading_padding(attention_mask), sequences.shape[1] - 1)
    sequences, attention_mask = sequences[:, cut:], attention_mask[:, cut:]
    positions = torch.arange(sequences.shape[1], device=sequences.device)
    last = (attention_mask.long() * positions).argmax(dim=1, keepdim=True)  # (B, 1)
    picked = hidden_states(model, sequences, attention_mask, autocast, keep=last)[:, 0]
    return scalar_head(score_head(model), picked)
