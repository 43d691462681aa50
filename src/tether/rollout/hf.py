"""The default engine: Hugging Face ``generate`` on left-padded prompts, in process."""

from __future__ import annotations

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from tether.data import collate_left
from tether.common.dispatch import prompts
from tether.models.forward import autocast_context
from tether.rollout.base import (
    SamplesGivenModel,
    SamplingParams,
    StepHook,
    generate_chunks,
    make_rollout,
    no_decode_context,
)
from tether.rollout.sampling import step_logprobs
from tether.types import Rollout


class HFGenerationEngine(SamplesGivenModel):
    """Samples with ``model.generate``; shares the actor's weights, so syncing is free.

    ``capture``: also return the sampled tokens' log-probs and entropies under the raw
    (unfiltered) logits at the sampling temperature, so the actor needs no second forward.
    ``autocast``: "bf16" samples under bf16 autocast (the weights stay fp32). ``generate`` then
    runs the LM head in bf16 too, so captured log-probs carry bf16 logit rounding (up to ~0.04
    on the trained demo model) that the update's fp32 head does not; the lean engine (the
    default) runs its head in fp32 and has none.
    """

    def __init__(self, model, tokenizer, autocast: str = "none", capture: bool = False, decode_context=None):
        self.model = model
        self.tokenizer = tokenizer
        self.autocast = autocast
        self.capture = capture
        self.decode_context = decode_context or no_decode_context

    @prompts
    def generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                 seed: int | None = None, chunk_size: int | None = None, on_step: StepHook | None = None) -> Rollout:
        one = lambda ids, texts: self._generate(ids, texts, params, on_step)  # noqa: E731
        return generate_chunks(one, prompt_ids, prompts, seed, chunk_size, self.tokenizer.pad_token_id)

    @torch.no_grad()
    def _generate(self, prompt_ids: list[list[int]], prompts: list[str], params: SamplingParams,
                  on_step: StepHook | None) -> Rollout:
        tok = self.tokenizer
        device = next(self.model.parameters()).device
        input_ids, attention_mask = (t.to(device) for t in collate_left(prompt_ids, tok.pad_token_id))
        was_training = self.model.training
        self.model.eval()
        kwargs = dict(
            max_new_tokens=params.max_new_tokens,
            min_new_tokens=params.min_new_tokens or None,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
        if params.greedy:
            kwargs.update(do_sample=False, temperature=None, top_k=None, top_p=None)
        else:
            # top_k=0 / top_p=1 switch the filters off explicitly: HF's default top_k is 50.
            kwargs.update(do_sample=True, temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        if on_step is not None:
            kwargs["stopping_criteria"] = StoppingCriteriaList([_StepStop(on_step)])
        capture = self.capture and not params.greedy
        if capture:
            kwargs.update(output_logits=True, return_dict_in_generate=True)
        try:
            # A CPU engine's decode context packs weights once for all steps (bf16 copies under bf16 autocast).
            with autocast_context(self.model, self.autocast), self.decode_context(self.model, len(prompt_ids)):
                out = self.model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        finally:
            self.model.train(was_training)
        sequences = out.sequences if capture else out
        responses = sequences[:, input_ids.shape[1]:]
        steps = None
        if capture:
            steps = [step_logprobs(logits, responses[:, j], params.temperature) for j, logits in enumerate(out.logits)]
        return make_rollout(
            tok, input_ids, attention_mask, responses, prompts,
            [lp for lp, _ in steps] if capture else None, [ent for _, ent in steps] if capture else None,
        )


class _StepStop(StoppingCriteria):
    """An ``on_step`` hook as a ``generate`` stopping criterion (rows it reports done stop)."""

    def __init__(self, on_step: StepHook):
        self.on_step = on_step

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return self.on_step(input_ids[:, -1]).to(device=input_ids.device, dtype=torch.bool)
