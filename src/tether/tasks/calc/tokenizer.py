"""The calc world's word-level tokenizer: arith's (:func:`tether.tasks.arith.tokenizer.word_tokenizer`)
over :data:`~tether.tasks.calc.world.VOCAB_WORDS` (numbers 0..999, the chat words with ``tool``, the
words of a tool call), with 128 positions and a chat template that closes assistant turns.

The chat template renders every message as ``ROLE : CONTENT `` like arith's, after ``<bos>`` and
with ``assistant :`` as the generation prompt, except that an assistant message's content is
followed by ``<eos>``::

    <bos>user : what is 37 times 4 ? assistant : <tool_call> ... </tool_call><eos> tool : 148 assistant :

``<eos>`` is the token the policy samples to end a turn. In an episode the engine's sampled ids are
kept verbatim, ``<eos>`` included (docs/episodes.md, "Token in, token out"); with arith's template
an SFT row of the second turn (question, call, result -> answer) would render the call without it,
so SFT would train on contexts the episodes never show. With it, an SFT row's ids are exactly the
episode's ids up to that turn, and the template stays append-only (the rendering of a turn ends with
the stop token the engine sampled, so the next observation is a plain delta).
"""

from __future__ import annotations

from transformers import PreTrainedTokenizerFast

from tether.tasks.arith.tokenizer import word_tokenizer
from tether.tasks.calc.world import VOCAB_WORDS

MODEL_MAX_LENGTH = 128

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }} : {{ message['content'] }}"
    "{% if message['role'] == 'assistant' %}{{ eos_token }}{% endif %} "
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The calc world's word-level tokenizer (deterministic: ids never change)."""
    return word_tokenizer(VOCAB_WORDS, CHAT_TEMPLATE, MODEL_MAX_LENGTH)
