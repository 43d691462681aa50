"""Episodes built by appending (tether.rollout.episode_tokens), on tokenizers built here."""

from __future__ import annotations

import copy

import pytest

from tether.bench.shapes import IM_END, sized_tokenizer
from tether.rollout.episode_tokens import (EpisodeTokens, TemplateNotAppendOnly, assistant_closing, check_append_only,
                                           observation_ids, observation_text)
from tether.tasks.arith.tokenizer import EOS as ARITH_EOS
from tether.tasks.arith.tokenizer import build_tokenizer

CHATML_CONVERSATION = [
    {"role": "system", "content": "You add numbers. Use the calculator."},
    {"role": "user", "content": "What is 17 + 25?"},
    {"role": "assistant", "content": "Let me check with the calculator: add(17, 25)"},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "The calculator says 42."},
    {"role": "user", "content": "Great!! And doubled?"},
    {"role": "assistant", "content": "Doubled, that is 84!!"},
]
ARITH_CONVERSATION = [
    {"role": "user", "content": "what is 2 + 2 ?"},
    {"role": "assistant", "content": "let me think"},
    {"role": "user", "content": "ok"},
    {"role": "assistant", "content": "the answer is 4"},
    {"role": "user", "content": "well 3 times 3 ?"},
    {"role": "assistant", "content": "9"},
]
# ChatML that drops the reasoning of every assistant turn but the last (as Qwen3's template does
# before the last user query): not append-only.
DROPS_REASONING = (
    "{% for message in messages %}{% set content = message['content'] %}"
    "{% if message['role'] == 'assistant' and not loop.last %}{% set content = content.split('</think>')[-1] %}"
    "{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + content + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def chatml():
    return sized_tokenizer(70000)  # every byte pair merges: words split into several ids


@pytest.fixture(scope="module")
def arith():
    return build_tokenizer()


def encode(tok, text):
    return tok.encode(text, add_special_tokens=False)


def render(tok, messages, generation_prompt=False):
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def run_episode(tok, conversation, stop_id, sample=None):
    """Play ``conversation`` as an engine would: the first assistant turn's prompt, then each
    assistant turn sampled as ``sample(content) + [stop_id]``, and each observation appended with
    :func:`observation_ids`. Returns the episode and the sampled ids of each turn."""
    sample = sample or (lambda text: encode(tok, text))
    first = next(i for i, m in enumerate(conversation) if m["role"] == "assistant")
    episode = EpisodeTokens(encode(tok, render(tok, conversation[:first], True)))
    sampled_turns = []
    turns = [i for i, m in enumerate(conversation) if m["role"] == "assistant"]
    for k, i in enumerate(turns):
        sampled = sample(conversation[i]["content"]) + [stop_id]
        episode.add_sampled(sampled, [-0.5] * len(sampled))
        sampled_turns.append(sampled)
        if k + 1 < len(turns):
            observation = conversation[i + 1:turns[k + 1]]
            episode.add_observation(observation_ids(tok, conversation[:i + 1], observation, sampled_ids=sampled))
    return episode, sampled_turns


def test_chatml_episode_equals_the_whole_conversation_tokenised_at_once(chatml):
    check_append_only(chatml, CHATML_CONVERSATION)
    episode, sampled = run_episode(chatml, CHATML_CONVERSATION, chatml.convert_tokens_to_ids(IM_END))
    whole = encode(chatml, render(chatml, CHATML_CONVERSATION))
    # The last turn's closing is "<|im_end|>\n"; the engine sampled "<|im_end|>", "\n" never comes.
    assert episode.ids + encode(chatml, "\n") == whole
    assert [episode.response_ids[a:b] for a, b in episode.turns] == sampled
    assert len(episode.turns) == 3 and episode.turns[0][0] == 0


def test_the_closing_rule_on_chatml(chatml):
    convo = CHATML_CONVERSATION[:4]
    assert assistant_closing(chatml, convo[:3]) == "<|im_end|>\n"
    stopped = encode(chatml, convo[2]["content"]) + [chatml.convert_tokens_to_ids(IM_END)]
    assert observation_text(chatml, convo[:3], convo[3:], sampled_ids=stopped) == (
        "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n")
    # Cut by the length cap: no stop token sampled, the template's whole closing is appended.
    cut = encode(chatml, convo[2]["content"])
    assert observation_text(chatml, convo[:3], convo[3:], sampled_ids=cut).startswith("<|im_end|>\n<|im_start|>tool")


def test_arith_episode_keeps_the_sampled_eos_the_template_does_not_write(arith):
    check_append_only(arith, ARITH_CONVERSATION)
    eos = arith.convert_tokens_to_ids(ARITH_EOS)
    assert assistant_closing(arith, ARITH_CONVERSATION[:2]) == " "
    episode, _ = run_episode(arith, ARITH_CONVERSATION, eos)
    whole = encode(arith, render(arith, ARITH_CONVERSATION))
    assert episode.ids.count(eos) == 3
    assert [i for i in episode.ids if i != eos] == whole
    assert arith.unk_token_id not in episode.ids


def test_a_non_canonical_split_is_kept_verbatim(chatml):
    """The engine may sample ids that decode to the text but are not what encode gives; the
    episode keeps them, while re-tokenising the conversation would give other ids."""
    def one_byte_per_id(text):
        return [chatml.convert_tokens_to_ids(ch) for ch in chatml.convert_ids_to_tokens(encode(chatml, text))
                for ch in ch]

    stop = chatml.convert_tokens_to_ids(IM_END)
    canonical, _ = run_episode(chatml, CHATML_CONVERSATION, stop)
    episode, sampled = run_episode(chatml, CHATML_CONVERSATION, stop, sample=one_byte_per_id)
    assert [episode.response_ids[a:b] for a, b in episode.turns] == sampled
    retokenised = encode(chatml, chatml.decode(episode.ids, skip_special_tokens=False))
    assert chatml.decode(retokenised) == chatml.decode(episode.ids)
    assert retokenised == canonical.ids != episode.ids
    assert len(episode.ids) > len(canonical.ids)
    # The observations do not depend on how the turns were split.
    observations = [[i for i, m in zip(e.response_ids, e.action_mask) if not m] for e in (episode, canonical)]
    assert observations[0] == observations[1]


def test_a_template_that_drops_earlier_reasoning_is_refused(chatml):
    tok = copy.deepcopy(chatml)
    tok.chat_template = DROPS_REASONING
    convo = [{"role": "user", "content": "2 + 2?"},
             {"role": "assistant", "content": "<think>two and two</think>4"},
             {"role": "user", "content": "Sure?"}]
    sampled = encode(tok, convo[1]["content"]) + [tok.convert_tokens_to_ids(IM_END)]
    with pytest.raises(TemplateNotAppendOnly) as err:
        observation_ids(tok, convo[:2], convo[2:], sampled_ids=sampled)
    message = str(err.value)
    assert "not append-only" in message and "re-renders the conversation" in message
    at = len("<|im_start|>user\n2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert f"differ at character {at}" in message
    assert "'<think>two and two</think>4<|im_end|>" in message and "'4<|im_end|>\\n<|im_start|>user" in message
    with pytest.raises(TemplateNotAppendOnly, match="index 1"):
        check_append_only(tok, convo + [{"role": "assistant", "content": "<think>yes</think>Yes."}])
    check_append_only(tok, [m | {"content": "4"} if m["role"] == "assistant" else m for m in convo])


def test_a_template_that_does_not_write_the_content_verbatim_is_refused(chatml):
    tok = copy.deepcopy(chatml)
    tok.chat_template = DROPS_REASONING.replace("+ content +", "+ content | trim +")
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello\n"}]
    with pytest.raises(TemplateNotAppendOnly, match="content verbatim"):
        check_append_only(tok, convo)


def test_episode_masks_logprobs_and_budget():
    episode = EpisodeTokens([5, 6])
    episode.add_sampled([1, 2, 3], [-0.1, -0.2, -0.3])
    assert episode.add_observation([7, 8])
    episode.add_sampled([4], [-0.4])
    assert episode.ids == [5, 6, 1, 2, 3, 7, 8, 4]
    assert episode.action_mask == [1, 1, 1, 0, 0, 1]
    assert episode.engine_logprobs == [-0.1, -0.2, -0.3, 0.0, 0.0, -0.4]
    assert episode.turns == [(0, 3), (5, 6)]
    assert episode.room(10) == 4 and episode.room(3) == 0
    assert not episode.add_observation([9] * 5, max_tokens=10)
    assert episode.truncated and episode.room(10) == 0 and len(episode.response_ids) == 6
    with pytest.raises(ValueError, match="truncated"):
        episode.add_sampled([1])


def test_sampled_ids_past_the_budget_are_cut_and_logprobs_are_all_or_none():
    episode = EpisodeTokens([5])
    episode.add_sampled([1, 2, 3, 4], max_tokens=3)
    assert episode.response_ids == [1, 2, 3] and episode.truncated and episode.engine_logprobs is None
    other = EpisodeTokens([5])
    other.add_sampled([1], [-1.0])
    with pytest.raises(ValueError, match="every sampled turn or for none"):
        other.add_sampled([2])
    with pytest.raises(ValueError, match="one per id"):
        other.add_sampled([2, 3], [-1.0])


def test_misuse_is_named(chatml):
    convo = CHATML_CONVERSATION[:3]
    with pytest.raises(ValueError, match="last message must be the assistant"):
        observation_ids(chatml, convo[:2], convo[2:], sampled_ids=[1])
    with pytest.raises(ValueError, match="sampled_ids is empty"):
        observation_ids(chatml, convo, [{"role": "user", "content": "x"}], sampled_ids=[])


def test_the_refusal_is_a_tether_error_and_a_value_error():
    from tether.common.errors import ModelError

    assert issubclass(TemplateNotAppendOnly, ModelError) and issubclass(TemplateNotAppendOnly, ValueError)
