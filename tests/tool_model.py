"""A tiny Qwen2 policy that has learned one tool-use exchange by heart, for `tether serve`'s tool
tests: asked "what is 2 plus 3 ?" with an `add` tool offered, it answers (greedily) with the call
`<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>`; shown the tool's answer,
it says "the sum is 5 .". Its tokenizer is byte-level BPE with a ChatML template that renders
`tools` and assistant `tool_calls` the way Qwen2.5's does, so the prompts it learned are exactly
the prompts the server renders for these requests. Nothing is downloaded; building takes seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

QUESTION = "what is 2 plus 3 ?"
ARGUMENTS = {"a": 2, "b": 3}
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
FINAL = "the sum is 5 ."
TOOLS = [{"type": "function", "function": {
    "name": "add", "description": "Add two numbers.",
    "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                   "required": ["a", "b"]}}}]

TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\\n# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{ '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{ '\\n</tools>\\nCall a tool as <tool_call>\\n{\"name\": ..., \"arguments\": ...}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'tool' %}"
    "{{ '<|im_start|>user\\n<tool_response>\\n' + m.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' and m.tool_calls %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if m.content %}{{ m.content + '\\n' }}{%- endif %}"
    "{%- for c in m.tool_calls %}{%- if not loop.first %}{{ '\\n' }}{%- endif %}"
    "{{ '<tool_call>\\n{\"name\": \"' + c.function.name + '\", \"arguments\": ' + (c.function.arguments | tojson) "
    "+ '}\\n</tool_call>' }}{%- endfor %}{{ '<|im_end|>\\n' }}"
    "{%- else %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)


def conversations() -> list[tuple[list[dict], str]]:
    """(messages, the answer learned for them): the call, then the answer after the tool's result."""
    ask = [{"role": "user", "content": QUESTION}]
    called = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": dict(ARGUMENTS)}}]}
    answered = {"role": "tool", "tool_call_id": "call_0", "content": "5"}
    return [(ask, CALL_TEXT), (ask + [called, answered], FINAL)]


def build_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = TEMPLATE
    return tok


def _examples(tok) -> list[tuple[torch.Tensor, int]]:
    """Each conversation as (prompt ids + answer ids + EOS, where the answer starts)."""
    out = []
    for messages, answer in conversations():
        prompt = list(tok.apply_chat_template(messages, tools=TOOLS, add_generation_prompt=True, tokenize=True,
                                              return_dict=False))
        target = tok.encode(answer, add_special_tokens=False) + [tok.eos_token_id]
        out.append((torch.tensor(prompt + target), len(prompt)))
    return out


def _learned(model, examples, margin: float) -> bool:
    """Every answer token is the most likely one by ``margin`` (log-prob): greedy decoding says it."""
    with torch.no_grad():
        for ids, start in examples:
            logp = model(ids[None, :-1]).logits[0].log_softmax(-1)[start - 1:]
            target = ids[start:]
            best_other = logp.scatter(1, target[:, None], float("-inf")).max(-1).values
            if not bool((logp.gather(1, target[:, None])[:, 0] - best_other > margin).all()):
                return False
    return True


def build(out: Path, max_steps: int = 600) -> Path:
    """Train the model to answer its two conversations and save it with its tokenizer in ``out``."""
    tok, model = tiny_qwen2(out, [TEMPLATE, json.dumps(TOOLS), CALL_TEXT, FINAL, QUESTION], heads=4, kv_heads=2)
    learn_by_heart(model, _examples(tok), max_steps, "the tiny tool model")
    model.save_pretrained(out)
    return out


def tiny_qwen2(out: Path, corpus: list[str], heads: int, kv_heads: int):
    """(tokenizer, model): the BPE tokenizer of ``corpus`` and a 2-layer Qwen2 of hidden size 64,
    both saved in ``out`` (the model's weights once trained), seeded 0. The tokenizer is the one read
    back: loaded beside a Qwen2 config it is Qwen2's class, whose pre-tokenizer splits digits apart
    (the one built here does not), so the ids learned are the ids a server will see."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from tether.models import load_tokenizer

    made = build_tokenizer(corpus)
    made.save_pretrained(out)
    config = Qwen2Config(vocab_size=len(made), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=512,
                         bos_token_id=made.eos_token_id, eos_token_id=made.eos_token_id,
                         pad_token_id=made.pad_token_id)
    config.save_pretrained(out)
    torch.manual_seed(0)
    return load_tokenizer(str(out)), Qwen2ForCausalLM(config)


def learn_by_heart(model, examples, max_steps: int, what: str, checked=()) -> None:
    """Adam on ``examples`` ((ids, where the answer starts)) until greedy decoding says every answer
    of them and of ``checked`` (held out), by a margin of 2 nats; an AssertionError naming ``what``
    after ``max_steps``."""
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(max_steps):
        loss = sum(torch.nn.functional.cross_entropy(model(ids[None, :-1]).logits[0, start - 1:], ids[start:])
                   for ids, start in examples)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 19 and _learned(model, [*examples, *checked], margin=2.0):
            return
    raise AssertionError(f"{what} did not learn its answers in {max_steps} steps")
