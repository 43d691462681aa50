"""The calc tokenizer: every text of the world round-trips, a decoded call parses, and an SFT row's
ids are exactly the ids an episode holds (the template closes assistant turns with <eos>)."""

from __future__ import annotations

import random

import pytest

from tether.data import encode_chat
from tether.data.templates import encode_response
from tether.environments.tool_calls import parse_tool_calls
from tether.rollout.episode_tokens import check_append_only, observation_ids
from tether.tasks.calc import world
from tether.tasks.calc.tokenizer import build_tokenizer

CONVERSATION = world.tool_conversation("what is 37 times 4 ?", 37, 4)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_the_vocabulary_is_the_world_and_four_special_tokens(tok):
    assert len(tok) == len(world.VOCAB_WORDS) + 4 == 1024
    assert (tok.pad_token_id, tok.bos_token_id, tok.eos_token_id) == (0, 2, 3)
    assert tok.model_max_length == 128
    vocab = tok.get_vocab()
    assert all(vocab[str(n)] > 3 for n in range(1000))


def test_every_text_round_trips_one_id_per_word(tok):
    rng = random.Random(0)
    texts = list(world.PROMPTS[::7])
    for prompt in world.PROMPTS[::5]:
        texts += [m["content"] for m in world.sample_tool_demonstration(rng, prompt)]
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.unk_token_id not in ids and len(ids) == len(text.split())
        assert tok.decode(ids) == text


def test_a_decoded_call_parses_as_the_call(tok):
    ids = tok(world.call_text(37, 4), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    turn = parse_tool_calls(tok.decode(ids, skip_special_tokens=True))
    assert turn.content == "" and not turn.malformed
    assert [(c.name, c.arguments) for c in turn.calls] == [("calculator", {"a": 37, "b": 4})]


def test_the_template_writes_role_colon_content_and_closes_assistant_turns(tok):
    text = tok.apply_chat_template(CONVERSATION, tokenize=False)
    assert text == (f"<bos>user : what is 37 times 4 ? assistant : {world.call_text(37, 4)}<eos> tool : 148 "
                    "assistant : 37 times 4 is 148 .<eos> ")
    prompt = tok.apply_chat_template(CONVERSATION[:1], tokenize=False, add_generation_prompt=True)
    assert prompt == "<bos>user : what is 37 times 4 ? assistant :"


def test_an_sft_row_holds_the_ids_of_the_episode(tok):
    """(question, call, result -> answer) as SFT encodes it == the episode built by appending."""
    check_append_only(tok, CONVERSATION, [world.TOOL_SCHEMA])
    prompt_ids = encode_chat(CONVERSATION[:1], tok, [world.TOOL_SCHEMA])
    call_ids = encode_response(CONVERSATION[1]["content"], tok)  # the sampled turn, <eos> included
    obs = observation_ids(tok, CONVERSATION[:2], CONVERSATION[2:3], [world.TOOL_SCHEMA], sampled_ids=call_ids)
    assert tok.convert_ids_to_tokens(obs) == ["tool", ":", "148", "assistant", ":"]
    assert prompt_ids + call_ids + obs == encode_chat(CONVERSATION[:3], tok, [world.TOOL_SCHEMA])
    whole = encode_chat(CONVERSATION[:3], tok) + encode_response(CONVERSATION[3]["content"], tok)
    assert len(whole) == 43 <= tok.model_max_length


def test_save_and_load(tok, tmp_path):
    from transformers import AutoTokenizer

    tok.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.apply_chat_template(CONVERSATION, tokenize=False) == tok.apply_chat_template(CONVERSATION,
                                                                                            tokenize=False)
    text = world.call_text(99, 9)
    assert loaded.decode(loaded(text, add_special_tokens=False)["input_ids"]) == text
