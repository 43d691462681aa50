"""Validated requests -> model jobs. Every limit is checked here, before anything is queued.

Runs on the event loop: tokenizing a prompt is cheap next to generating from it, and doing
it here means bad input is a 400 for that request alone, never an error inside a batch.
"""

from __future__ import annotations

from tether.data import encode_chat, encode_prompt, encode_response
from tether.common.errors import TetherError
from tether.serve import tool_use
from tether.serve.errors import APIError, bad_request, reward_model_required
from tether.serve.schemas import ChatCompletionRequest, CompletionRequest, RewardRequest, SamplingRequest
from tether.serve.service import GenJob, ModelService, ScoreJob
from tether.serve.settings import ServeSettings


def check_model(requested: str | None, served: str) -> None:
    if requested and requested != served:
        raise APIError(404, f"The model '{requested}' does not exist; this server serves '{served}'.",
                       param="model", code="model_not_found")


def _encode(prompt, tokenizer, mode: str, param: str, tools: list[dict] | None = None) -> list[int]:
    """A prompt's ids; chat ``tools`` go to the chat template (messages only)."""
    try:
        ids = encode_chat(prompt, tokenizer, tools) if tools is not None else encode_prompt(prompt, tokenizer, mode)
    except TetherError as err:
        raise bad_request(f"{param}: {err}", param=param) from None
    if not ids:
        raise bad_request(f"{param} is empty after tokenization.", param=param)
    return ids


class Planner:
    """Turns request bodies into :class:`GenJob` / :class:`ScoreJob` under the server's limits."""

    def __init__(self, service: ModelService, settings: ServeSettings):
        self.service = service
        self.settings = settings
        self._renders_calls: dict[int, bool] = {}  # id(tokenizer) -> its template writes tool_calls

    def _messages(self, messages: list[dict], tokenizer) -> list[dict]:
        """Messages for ``tokenizer``'s chat template (tool calls in the history: tool_use)."""
        if not any(m.get("tool_calls") for m in messages):
            return messages
        key = id(tokenizer)
        if key not in self._renders_calls:
            self._renders_calls[key] = tool_use.renders_tool_calls(tokenizer)
        return tool_use.template_messages(messages, self._renders_calls[key])

    # -- generation -----------------------------------------------------------------------------
    def chat(self, req: ChatCompletionRequest) -> GenJob:
        check_model(req.model, self.settings.model_name)
        if not getattr(self.service.tokenizer, "chat_template", None):
            raise bad_request("This model's tokenizer has no chat template, so it cannot take chat messages; "
                              "use POST /v1/completions with a plain prompt.", param="messages")
        tools = tool_use.check_tools(req.tools, req.tool_choice)
        messages = [m.as_dict() for m in req.messages]
        tok = self.service.tokenizer
        ids = _encode(self._messages(messages, tok), tok, "always", "messages", tools)
        rm = None
        if self._needs_scores(req, 1):
            rm = self._reward_ids(self._messages(messages, self.service.reward_tokenizer), "always", "messages", tools)
        return self._job(req, [ids], [rm] if rm is not None else None, "messages")

    def completion(self, req: CompletionRequest) -> GenJob:
        check_model(req.model, self.settings.model_name)
        prompts = req.prompt_list()
        tok = self.service.tokenizer
        ids, texts = [], []
        for i, p in enumerate(prompts):
            param = "prompt" if len(prompts) == 1 else f"prompt[{i}]"
            if isinstance(p, str):
                ids.append(_encode(p, tok, "never", param))
                texts.append(p)
            else:
                bad = [t for t in p if not 0 <= t < len(tok)]
                if bad or not p:
                    raise bad_request(f"{param}: token ids must be in [0, {len(tok)}) and not empty.", param=param)
                ids.append(list(p))
                texts.append(tok.decode(p, skip_special_tokens=False))
        rm = None
        if self._needs_scores(req, len(prompts)):
            # The reward model sees the raw prompt text, as the policy did (no chat template).
            rm = [self._reward_ids(t, "never", "prompt") for t in texts]
        return self._job(req, ids, rm, "prompt")

    def _needs_scores(self, req: SamplingRequest, n_prompts: int) -> bool:
        """Validate n / best_of / stream; True when the samples must be scored."""
        s = self.settings
        if req.best_of is not None and req.best_of < req.n:
            raise bad_request(f"best_of ({req.best_of}) must be at least n ({req.n}).", param="best_of")
        if req.stream:
            if req.n > 1 or (req.best_of or 1) > 1 or n_prompts > 1:
                raise bad_request("Streaming supports one choice per request: use n=1, best_of=1 and one prompt.",
                                  param="stream")
        if (req.best_of or 1) > 1 and not self.service.has_reward:
            raise reward_model_required("best_of > 1")
        if req.return_scores and not self.service.has_reward:
            raise reward_model_required("return_scores")
        candidates = self.candidates(req)
        if n_prompts * candidates > s.max_n:
            param = "best_of" if candidates > req.n else "n"
            raise bad_request(
                f"This request asks for {n_prompts * candidates} sequences ({n_prompts} prompt(s) x {candidates}); "
                f"the limit is {s.max_n}.", param=param, code="too_many_sequences")
        return candidates > req.n or req.return_scores

    def candidates(self, req: SamplingRequest) -> int:
        """Samples per prompt: the request's best_of, else the server default for non-streaming ones."""
        if req.best_of is not None:
            return req.best_of
        if req.stream or not self.service.has_reward:
            return req.n
        return max(self.settings.best_of_default, req.n)

    def _job(self, req: SamplingRequest, prompts: list[list[int]], reward_prompts, param: str) -> GenJob:
        s = self.settings
        limit = req.token_limit
        if limit is not None and limit > s.max_tokens_limit:
            raise bad_request(f"max_tokens ({limit}) exceeds this server's limit of {s.max_tokens_limit}.",
                              param="max_tokens")
        max_tokens = []
        for i, ids in enumerate(prompts):
            where = param if len(prompts) == 1 else f"{param}[{i}]"
            if len(ids) > s.max_prompt_tokens:
                raise bad_request(f"{where} is {len(ids)} tokens; this server accepts at most {s.max_prompt_tokens}.",
                                  param=where, code="context_length_exceeded")
            room = (self.service.context - len(ids)) if self.service.context else None
            if room is not None and room < 1:
                raise bad_request(f"{where} is {len(ids)} tokens, which fills the model's context of "
                                  f"{self.service.context}.", param=where, code="context_length_exceeded")
            if limit is not None and room is not None and limit > room:
                raise bad_request(
                    f"{where} ({len(ids)} tokens) plus max_tokens ({limit}) exceeds the model's context of "
                    f"{self.service.context} tokens.", param="max_tokens", code="context_length_exceeded")
            if limit is not None:
                max_tokens.append(limit)
            else:
                max_tokens.append(min(s.default_max_tokens, s.max_tokens_limit, room or s.default_max_tokens))
        return GenJob(
            prompts=prompts,
            candidates=self.candidates(req),
            max_tokens=max_tokens,
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            stop=req.stops,
            seed=req.seed,
            reward_prompts=reward_prompts,
        )

    def _reward_ids(self, prompt, mode: str, param: str, tools: list[dict] | None = None) -> list[int]:
        return _encode(prompt, self.service.reward_tokenizer, mode, f"{param} (for the reward model)", tools)

    # -- rewards --------------------------------------------------------------------------------
    def rewards(self, req: RewardRequest) -> ScoreJob:
        s, svc = self.settings, self.service
        if not svc.has_reward:
            raise reward_model_required("POST /v1/rewards")
        if s.reward_model_name:
            check_model(req.model, s.reward_model_name)
        if len(req.pairs) > s.max_reward_pairs:
            raise bad_request(f"{len(req.pairs)} pairs in one request; the limit is {s.max_reward_pairs}.",
                              param="pairs")
        pairs = []
        for i, pair in enumerate(req.pairs):
            value = pair.prompt_value()
            if isinstance(value, list):
                value = self._messages(value, svc.reward_tokenizer)
            prompt = _encode(value, svc.reward_tokenizer, s.chat_template, f"pairs[{i}].prompt")
            if len(prompt) > s.max_prompt_tokens:
                raise bad_request(f"pairs[{i}].prompt is {len(prompt)} tokens; the limit is {s.max_prompt_tokens}.",
                                  param=f"pairs[{i}].prompt", code="context_length_exceeded")
            try:
                response = encode_response(pair.response, svc.reward_tokenizer)
            except TetherError as err:
                raise bad_request(f"pairs[{i}].response: {err}", param=f"pairs[{i}].response") from None
            if not pair.ended:
                response = response[:-1]
            total, ctx = len(prompt) + len(response), svc.reward_context
            if ctx is not None and total > ctx:
                raise bad_request(f"pairs[{i}] is {total} tokens; the reward model's context is {ctx}.",
                                  param=f"pairs[{i}]", code="context_length_exceeded")
            pairs.append((prompt, response))
        return ScoreJob(pairs=pairs)
