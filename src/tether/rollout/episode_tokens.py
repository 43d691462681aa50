"""Multi-turn episodes as one token sequence built by appending ("token in, token out").

Re-rendering the conversation with the chat template after each turn and tokenising it again gives
ids that can differ from those the engine sampled (a word the engine split its own way, a space
merged across a boundary), and then the trainer scores tokens the engine never sampled. Here an
episode is instead built by appending only, never re-tokenising what is already there:

    prompt ids | sampled ids (turn 1) | observation ids | sampled ids (turn 2) | ...

* the prompt's ids: the chat template's rendering of the opening messages with the generation
  prompt, tokenised once (kept apart, :attr:`EpisodeTokens.prompt_ids`, like ``Rollout.prompt_ids``);
* each assistant turn: the engine's sampled ids verbatim, up to and including its stop token;
* each observation (``tool`` or ``user`` messages): :func:`observation_ids`, the text the template
  adds for them (a delta, not a re-render), ending with the next assistant turn's generation prompt.

The delta. With ``R(msgs)`` the template's text (``apply_chat_template(tokenize=False)``) and
``R+(msgs)`` the same with the generation prompt, for a conversation ``msgs`` ending in the
assistant turn just sampled and new messages ``obs``:

1. ``R+(msgs[:-1])`` (the prompt the engine saw) must be a prefix of ``R(msgs)``, and the rest,
   the turn's text, must hold the assistant content verbatim: the *closing* is the turn's text after
   the content's first occurrence;
2. ``R(msgs)`` must be a prefix of ``R+(msgs + obs)``: the *delta* is the longer text's tail;
3. the closing rule: if the last sampled id is a special token (the engine stopped on it) and the
   closing starts with that token's text, that text is dropped from the closing (the engine sampled
   it); otherwise (cut by the length cap, or a stop token the template does not write) the whole
   closing stays. The rest of the closing is put before the delta, and that one string is
   tokenised with ``add_special_tokens=False``.

Example (ChatML): the engine, prompted with ``...<|im_start|>assistant\\n``, sampled ``4`` then
``<|im_end|>``; the observation is a tool message ``ok``.

    R(msgs)         = "...<|im_start|>assistant\\n4<|im_end|>\\n"  closing = "<|im_end|>\\n"
    last sampled id = <|im_end|> (special)                         rest    = "\\n"
    R+(msgs + obs)  = R(msgs) + "<|im_start|>tool\\nok<|im_end|>\\n<|im_start|>assistant\\n"
    appended text   = "\\n<|im_start|>tool\\nok<|im_end|>\\n<|im_start|>assistant\\n"

Had the turn been cut by the length cap (no ``<|im_end|>`` sampled), the appended text would start
with the whole closing, ``<|im_end|>\\n``: the turn is closed as the template closes it, with ids
the model did not sample (action mask 0). A template that does not write the stop token at all
(tether's arith template: ``assistant : 4 ``) keeps the sampled ``<eos>`` in the episode and
appends its whole closing (" "), so the episode differs from the full rendering by exactly the
stop tokens; sampled ids are never dropped.

A template that is not append-only (step 1 or 2 fails: e.g. one that drops earlier assistant
``<think>...</think>`` reasoning once a later turn is rendered, as Qwen3's does, or that renders an
earlier turn differently once it is not the last) is refused with :class:`TemplateNotAppendOnly`,
whose message names the step and the first differing character with the text on both sides.
:func:`check_append_only` runs the same checks over a whole example conversation up front.

When the template is append-only and the tokeniser splits the texts at the same places whole or in
pieces (ChatML with byte-level BPE: every boundary is a special token or a newline), the episode's
ids equal the tokenisation of the whole conversation rendered at once, except where the engine
sampled a split of its own; those ids are kept as sampled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tether.common.errors import ModelError

_SNIPPET = 40


class TemplateNotAppendOnly(ModelError, ValueError):
    """The chat template renders a longer conversation as something other than the shorter one's
    text plus new text, so an episode cannot be built by appending (a tokenizer unfit for episodes:
    a :class:`ModelError`, which the CLI prints as one paragraph; a ValueError too)."""


def _render(tokenizer, messages: Sequence[dict], tools, generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(list(messages), tools=tools, tokenize=False,
                                         add_generation_prompt=generation_prompt)


def _require_prefix(short: str, long: str, step: str) -> None:
    """Raise :class:`TemplateNotAppendOnly` naming ``step`` and the first difference unless ``long``
    starts with ``short``."""
    if long.startswith(short):
        return
    at = next((i for i, (a, b) in enumerate(zip(short, long)) if a != b), min(len(short), len(long)))
    before = short[max(0, at - _SNIPPET):at]
    raise TemplateNotAppendOnly(
        f"the chat template is not append-only: {step}. The shorter rendering ({len(short)} characters) "
        f"is not a prefix of the longer one; they first differ at character {at}, after {before!r}: "
        f"{short[at:at + _SNIPPET]!r} became {long[at:at + _SNIPPET]!r}. Episodes append the engine's "
        "sampled ids and the template's text for each new turn, so earlier turns must render the same "
        "text whatever follows them; use a template that keeps earlier turns verbatim (e.g. keeps "
        "earlier reasoning), or render single-turn.")


def assistant_closing(tokenizer, messages: Sequence[dict], tools=None) -> str:
    """The text the template writes after the content of ``messages[-1]`` (an assistant message with
    the text the engine sampled, stop token excluded), e.g. ``"<|im_end|>\\n"`` for ChatML.

    Raises :class:`TemplateNotAppendOnly` when the rendering of the turn does not start with the
    generation prompt the engine saw, or does not hold the content verbatim."""
    *head, last = messages
    if last.get("role") != "assistant":
        raise ValueError(f"the last message must be the assistant turn just sampled, not {last.get('role')!r}")
    prompt = _render(tokenizer, head, tools, True)
    whole = _render(tokenizer, messages, tools, False)
    _require_prefix(prompt, whole, "rendering an assistant turn changes the prompt text before it "
                                   "(the generation prompt the engine saw)")
    turn, content = whole[len(prompt):], last.get("content") or ""
    at = turn.find(content)
    if at < 0:
        raise TemplateNotAppendOnly(
            f"the chat template is not append-only: it does not write the assistant content verbatim "
            f"(content starts {content[:_SNIPPET]!r}; the rendered turn is {turn[:2 * _SNIPPET]!r}), so the "
            "sampled ids are not what it renders.")
    return turn[at + len(content):]


def _stop_text(tokenizer, token_id: int) -> str:
    """The text of ``token_id`` when it is a special token (a stop token), else ""."""
    special = set(tokenizer.all_special_ids)
    special |= {i for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items() if t.special}
    return tokenizer.convert_ids_to_tokens(int(token_id)) if int(token_id) in special else ""


def observation_text(tokenizer, messages: Sequence[dict], observation: Sequence[dict], tools=None, *,
                     sampled_ids: Sequence[int]) -> str:
    """The text to append after the engine's sampled ids of the last assistant turn (module
    docstring): the unsampled rest of the turn's closing, the observation's rendering, and the next
    assistant turn's generation prompt.

    ``messages``: the conversation so far, the last an assistant message whose content is the text
    of ``sampled_ids`` without the stop token; ``observation``: the new messages (roles ``tool``,
    ``user``, ...); ``sampled_ids``: that turn's sampled ids (only the last one is read)."""
    if not observation:
        raise ValueError("observation is empty: give the new messages (a tool result, a user turn, ...)")
    if len(sampled_ids) == 0:
        raise ValueError("sampled_ids is empty: give the ids the engine sampled for the last turn")
    closing = assistant_closing(tokenizer, messages, tools)
    stop = _stop_text(tokenizer, sampled_ids[-1])
    rest = closing[len(stop):] if stop and closing.startswith(stop) else closing
    whole = _render(tokenizer, messages, tools, False)
    longer = _render(tokenizer, list(messages) + list(observation), tools, True)
    _require_prefix(whole, longer, "adding the observation re-renders the conversation before it")
    return rest + longer[len(whole):]


def observation_ids(tokenizer, messages: Sequence[dict], observation: Sequence[dict], tools=None, *,
                    sampled_ids: Sequence[int]) -> list[int]:
    """(O,) the ids to append after ``sampled_ids``: :func:`observation_text` tokenised with
    ``add_special_tokens=False``. Raises :class:`TemplateNotAppendOnly` for a template that is not
    append-only."""
    text = observation_text(tokenizer, messages, observation, tools, sampled_ids=sampled_ids)
    return list(tokenizer.encode(text, add_special_tokens=False))


def check_append_only(tokenizer, messages: Sequence[dict], tools=None) -> None:
    """Refuse (:class:`TemplateNotAppendOnly`) a template that is not append-only on the example
    conversation ``messages`` (system/user messages, then assistant turns and observations): the
    checks of :func:`observation_text` at every assistant turn, with its observation when one follows.
    Assistant turns without reasoning cannot show a template that drops reasoning: give an example
    whose assistant turns look like the model's (``<think>...</think>`` included)."""
    turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    if not turns:
        raise ValueError("the example conversation has no assistant turn after an opening message")
    for i in turns:
        assistant_closing(tokenizer, messages[:i + 1], tools)
        end = next((j for j in turns if j > i), len(messages))
        if end > i + 1:
            _require_prefix(_render(tokenizer, messages[:i + 1], tools, False),
                            _render(tokenizer, messages[:end], tools, True),
                            f"adding the messages after the assistant turn at index {i} re-renders the "
                            "conversation before them")


@dataclass
class EpisodeTokens:
    """One episode's ids, built by appending (module docstring).

    ``prompt_ids`` (P,): the opening messages rendered with the generation prompt (kept apart, as in
    ``Rollout``: left-padded there). ``response_ids`` (A,): every sampled and observation id after
    the prompt, in order; ``action_mask`` (A,): 1 on sampled ids, 0 on observation ids;
    ``engine_logprobs`` (A,): the engine's log-probs on sampled ids, 0.0 on observation ids, or None
    when the engine gave none (for every turn or for none); ``turns``: the (start, end) span of each
    sampled turn in ``response_ids``; ``truncated``: an add did not fit the token budget (nothing
    more can be added)."""

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    engine_logprobs: list[float] | None = field(default_factory=list)
    turns: list[tuple[int, int]] = field(default_factory=list)
    truncated: bool = False

    @property
    def ids(self) -> list[int]:
        """(P + A,) the whole sequence: what the engine is prompted with for the next turn."""
        return self.prompt_ids + self.response_ids

    def room(self, max_tokens: int) -> int:
        """Response ids that still fit under a budget of ``max_tokens`` response ids (A); pass
        ``min(room, per-turn cap)`` to the engine as the next turn's token cap."""
        return 0 if self.truncated else max(0, max_tokens - len(self.response_ids))

    def _open(self) -> None:
        if self.truncated:
            raise ValueError("the episode is truncated (its token budget is spent); it takes no more turns")

    def add_sampled(self, ids: Sequence[int], logprobs: Sequence[float] | None = None,
                    max_tokens: int | None = None) -> None:
        """Append one assistant turn's sampled ids (n,) verbatim, with the engine's log-probs (n,)
        if it captured them. With ``max_tokens``, ids past the budget are dropped and the episode
        is marked truncated."""
        self._open()
        if logprobs is not None and len(logprobs) != len(ids):
            raise ValueError(f"{len(logprobs)} log-probs for {len(ids)} sampled ids; give one per id")
        if (logprobs is None) != (self.engine_logprobs is None) and self.turns:
            raise ValueError("log-probs must be given for every sampled turn or for none")
        if logprobs is None:
            self.engine_logprobs = None
        keep = len(ids) if max_tokens is None else min(len(ids), self.room(max_tokens))
        self.truncated = keep < len(ids)
        start = len(self.response_ids)
        self.response_ids += [int(i) for i in ids[:keep]]
        self.action_mask += [1] * keep
        if self.engine_logprobs is not None:
            self.engine_logprobs += [float(x) for x in logprobs[:keep]]
        if keep:
            self.turns.append((start, start + keep))

    def add_observation(self, ids: Sequence[int], max_tokens: int | None = None) -> bool:
        """Append observation ids (m,) (from :func:`observation_ids`), action mask 0. With
        ``max_tokens``, an observation that does not fit whole is not added, the episode is marked
        truncated and False is returned (no half observation is left to sample after)."""
        self._open()
        if max_tokens is not None and len(ids) > self.room(max_tokens):
            self.truncated = True
            return False
        self.response_ids += [int(i) for i in ids]
        self.action_mask += [0] * len(ids)
        if self.engine_logprobs is not None:
            self.engine_logprobs += [0.0] * len(ids)
        return True
