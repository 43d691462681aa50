"""A lean decode loop: the model's own forward with a KV cache, no ``generate`` machinery.

Same interface and, with the same torch RNG state, the same tokens as
:class:`~tether.rollout.hf.HFGenerationEngine` (the filters and the draw are ``generate``'s;
see :mod:`tether.rollout.sampling`). It differs in what it leaves out: the model's
``generation_config`` extras (repetition penalty, bad words, ...) are not applied, so the
sampling distribution is exactly the one PPO's log-probs describe. It captures the sampled
tokens' log-probs and entropies as it goes, so the actor needs no second forward pass.

Under bf16 autocast the trunk runs in bf16 but the LM head runs in fp32, as in the update's
log-prob pass (:func:`tether.models.forward.logprobs_from_hidden`). A bf16 head would round
each logit to 8 bits of mantissa: on the trained demo model that moved the captured log-probs
by up to 0.04 from the update's fresh pass (4e-3 on average); with the fp32 head the two agree
to 3e-3 at most (1e-5 on average), so the first minibatch's ratios are 1 and the k1 KL to an
identical reference is 0 up to that (docs/performance.md, "bf16 autocast").
"""

from __future__ import annotations

import inspect

import torch

from tether.data import collate_left
from tether.common.dispatch import prompts
from tether.models import last_layer
from tether.models.forward import autocast_context, check_last_layer, position_ids
from tether.rollout.base import SamplesGivenModel, SamplingParams, StepHook, generate_chunks, no_decode_context
from tether.rollout.base import make_rollout
from tether.rollout.sampling import draw, filter_logits, step_logprobs
from tether.types import Rollout


class LeanGenerationEngine(SamplesGivenModel):
    """Samples with a plain loop over ``model(...)`` and a dynamic KV cache; shares the actor's weights.

    ``autocast``: "none", "bf16" or "fp16" (the trunk under autocast, the LM head in fp32).
    ``decode_context(model, rows, fp32=(modules,))``: a context entered around the decode loop,
    e.g. the CPU engines' packing of weights for the whole rollout (:mod:`tether.engines.cpu`).
    """

    def __init__(self, model, tokenizer, autocast: str = "none", capture: bool = True, decode_context=None):
        self.model = model
        self.tokenizer = tokenizer
        self.autocast = autocast
        self.capture = capture
        self.decode_context = decode_context or no_decode_context

    def _logits_kwargs(self) -> dict:
        params = inspect.signature(self.model.forward).parameters
        return {"logits_to_keep": 1} if "logits_to_keep" in params else {}

    def _fp32_head(self) -> bool:
        """The LM head runs apart from the trunk, in fp32 with autocast off (under autocast)."""
        return self.autocast not in (None, "none")

    def _next_logits(self, **inputs) -> torch.Tensor:
        """(B, V) fp32 logits for the next token after a forward over ``inputs`` (with the cache).

        Without autocast: the model's own forward. Under autocast: its trunk (``base_model``)
        under autocast, then its LM head in fp32 with autocast off, on the last position.
        """
        model = self.model
        if not self._fp32_head():
            return model(**inputs).logits[:, -1, :].float()
        inputs.pop("logits_to_keep", None)
        hidden = model.base_model(**inputs).last_hidden_state[:, -1, :]
        with torch.autocast(hidden.device.type, enabled=False):
            return model.get_output_embeddings()(hidden.float()).float()

    @prompts
    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step: StepHook | None = None) -> Rollout:
        one = lambda ids, texts: self._generate(ids, texts, params, on_step)  # noqa: E731
        return generate_chunks(one, prompt_ids, prompts, seed, chunk_size, self.tokenizer.pad_token_id)

    @torch.no_grad()
    def _generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                  on_step: StepHook | None) -> Rollout:
        from transformers import DynamicCache

        tok, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        input_ids, attention_mask = (t.to(device) for t in collate_left(prompt_ids, tok.pad_token_id))
        batch = input_ids.shape[0]
        capture = self.capture and not params.greedy
        was_training = model.training
        model.eval()
        tokens, logps, entropies = [], [], []
        unfinished = torch.ones(batch, dtype=torch.bool, device=device)
        try:
            # An fp32 LM head under autocast (so that captured log-probs match the update's).
            head = (model.get_output_embeddings(),) if self._fp32_head() else ()
            with autocast_context(model, self.autocast), self.decode_context(model, batch, fp32=head):
                cache = DynamicCache()
                mask = attention_mask
                positions = position_ids(mask)
                # Only the last prompt position's output is read (the cache still gets every key).
                last = slice(input_ids.shape[1] - 1, input_ids.shape[1])
                check_last_layer(model, input_ids, mask, last)
                with last_layer.last_layer_at(model, last):
                    logits = self._next_logits(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                               past_key_values=cache, use_cache=True, **self._logits_kwargs())
                next_pos = positions[:, -1:] + 1
                for step in range(params.max_new_tokens):
                    nxt = draw(filter_logits(logits, step, params, tok.eos_token_id), params)
                    nxt = torch.where(unfinished, nxt, torch.full_like(nxt, tok.pad_token_id))
                    if capture:
                        logp, ent = step_logprobs(logits, nxt, params.temperature)
                        logps.append(logp)
                        entropies.append(ent)
                    tokens.append(nxt)
                    unfinished &= nxt != tok.eos_token_id
                    if on_step is not None:
                        unfinished &= ~on_step(nxt).to(device)
                    if step == params.max_new_tokens - 1 or not bool(unfinished.any()):
                        break
                    mask = torch.cat([mask, mask.new_ones(batch, 1)], dim=1)
                    logits = self._next_logits(input_ids=nxt[:, None], attention_mask=mask, position_ids=next_pos,
                                               past_key_values=cache, use_cache=True)
                    next_pos = next_pos + 1
        finally:
            model.train(was_training)
        responses = torch.stack(tokens, dim=1)
        return make_rollout(tok, input_ids, attention_mask, responses, prompts,
                            logps if capture else None, entropies if capture else None)
