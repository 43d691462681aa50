"""The benchmark's models, tokenizer and prompts, built in memory from a seed.

Random-init Llama models with untied embeddings and SDPA attention: the policy and reference
are causal LMs, the critic and reward model the same shape with a scalar head. The tokenizer
is word-level over the model's vocabulary (``w4 w5 ...`` plus four specials), prepends BOS and
pads on the left, like the tokenizers tether loads from disk.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch

from tether.bench.flops import ModelDims
from tether.loops.rl_setup import PromptSet
from tether.models import disable_dropout

SIZES: dict[str, ModelDims] = {
    "tiny": ModelDims(hidden=128, layers=2, heads=4, ffn=512, vocab=2048),
    "small": ModelDims(hidden=256, layers=4, heads=4, ffn=2048, vocab=4096),
    "medium": ModelDims(hidden=512, layers=4, heads=8, ffn=2048, vocab=4096),
    # ~116M parameters per model: where LoRA's and checkpointing's memory shows.
    "large": ModelDims(hidden=768, layers=12, heads=12, ffn=3072, vocab=4096),
    # Not part of the benchmark configuration: a toy size for tests.
    "micro": ModelDims(hidden=32, layers=1, heads=2, ffn=64, vocab=128),
}
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
MAX_POSITIONS = 1024
PROMPT_WORDS = (16, 24)  # words per prompt (min, max); BOS is prepended


def word_tokenizer(vocab_size: int):
    """A word-level fast tokenizer with exactly ``vocab_size`` ids: specials 0-3, then ``w4`` ..."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    if vocab_size <= len(SPECIALS):
        raise ValueError(f"vocab_size must exceed {len(SPECIALS)}")
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({f"w{i}": i for i in range(len(SPECIALS), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )
    tok.padding_side = "left"
    return tok


def llama_config(dims: ModelDims, tokenizer, max_positions: int = MAX_POSITIONS):
    """The bench models' Llama config; ``max_positions``: the context (the padding bench's long
    rows need 2048)."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        vocab_size=dims.vocab,
        hidden_size=dims.hidden,
        num_hidden_layers=dims.layers,
        num_attention_heads=dims.heads,
        num_key_value_heads=dims.kv_heads or dims.heads,
        intermediate_size=dims.ffn,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        num_labels=1,
    )
    config._attn_implementation = "sdpa"
    return config


def _finish(model, tokenizer):
    disable_dropout(model)
    gen = getattr(model, "generation_config", None)
    if gen is not None:
        gen.pad_token_id = tokenizer.pad_token_id
        gen.eos_token_id = tokenizer.eos_token_id
        gen.bos_token_id = tokenizer.bos_token_id
    return model


def build_models(dims: ModelDims, tokenizer, seed: int = 0, reference: bool = True, critic: bool = True,
                 max_positions: int = MAX_POSITIONS) -> dict:
    """{'policy', 'reference', 'critic', 'reward'}: fp32, random init from ``seed``.

    The reference is a copy of the policy (PPO starts the actor at the reference); None without
    ``reference`` (a LoRA actor's base serves as the reference). The critic is None without
    ``critic`` (a LoRA critic on the reward model's base). ``max_positions``: their context.
    """
    from transformers import LlamaForCausalLM, LlamaForSequenceClassification

    config = llama_config(dims, tokenizer, max_positions)
    torch.manual_seed(seed)
    policy = _finish(LlamaForCausalLM(config), tokenizer)
    reference = copy.deepcopy(policy) if reference else None
    torch.manual_seed(seed + 1)
    critic = _finish(LlamaForSequenceClassification(config), tokenizer) if critic else None
    torch.manual_seed(seed + 2)
    reward = _finish(LlamaForSequenceClassification(config), tokenizer)
    return {"policy": policy, "reference": reference, "critic": critic, "reward": reward}


def prompt_set(tokenizer, n: int, min_words: int = PROMPT_WORDS[0], max_words: int = PROMPT_WORDS[1],
               seed: int = 0) -> PromptSet:
    """``n`` prompts of ``min_words``-``max_words`` random words each (BOS prepended on encoding)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(len(SPECIALS), tokenizer.vocab_size)]
    texts = [" ".join(rng.choices(words, k=rng.randint(min_words, max_words))) for _ in range(n)]
    ids = [tokenizer(t)["input_ids"] for t in texts]
    return PromptSet(ids=ids, texts=texts, dropped_long=0)


@dataclass
class BenchSetup:
    dims: ModelDims
    tokenizer: object
    models: dict
    prompts: PromptSet


def build_setup(dims: ModelDims, n_prompts: int, seed: int = 0, reference: bool = True,
                critic: bool = True) -> BenchSetup:
    tokenizer = word_tokenizer(dims.vocab)
    models = build_models(dims, tokenizer, seed, reference, critic)
    prompts = prompt_set(tokenizer, n_prompts, seed=seed)
    return BenchSetup(dims, tokenizer, models, prompts)


def config_dims(config) -> ModelDims:
    """The FLOP count's shape of a transformers config (Llama layout: gated MLP, GQA)."""
    return ModelDims(hidden=config.hidden_size, layers=config.num_hidden_layers, heads=config.num_attention_heads,
                     ffn=config.intermediate_size, vocab=config.vocab_size,
                     kv_heads=getattr(config, "num_key_value_heads", None))


def build_source_models(config, tokenizer, seed: int = 0, reference: bool = True, critic: bool = True) -> dict:
    """:func:`build_models` for a real architecture's config (:mod:`tether.bench.shapes`): the
    policy with transformers' own random init, scalar-head models of the same config."""
    from transformers import AutoModelForSequenceClassification

    from tether.bench.shapes import build_causal_lm

    config = copy.deepcopy(config)
    config.pad_token_id, config.eos_token_id = tokenizer.pad_token_id, tokenizer.eos_token_id
    config.bos_token_id = tokenizer.bos_token_id
    config.num_labels = 1
    config._attn_implementation = "sdpa"
    policy = _finish(build_causal_lm(config, seed), tokenizer)
    ref = copy.deepcopy(policy) if reference else None

    def scalar(s):
        torch.manual_seed(s)
        return _finish(AutoModelForSequenceClassification.from_config(config, dtype=torch.float32), tokenizer)

    return {"policy": policy, "reference": ref, "critic": scalar(seed + 1) if critic else None,
            "reward": scalar(seed + 2)}


def token_prompt_set(tokenizer, vocab_size: int, n: int, min_tokens: int, max_tokens: int, seed: int = 0) -> PromptSet:
    """``n`` prompts of ``min_tokens``-``max_tokens`` random non-special token ids each (a
    byte-level BPE's ids do not all decode to words, so the ids are drawn, the texts decoded)."""
    rng = random.Random(seed)
    specials = set(tokenizer.all_special_ids)
    top = min(vocab_size, tokenizer.vocab_size)
    ids = []
    for _ in range(n):
        row, length = [], max(rng.randint(min_tokens, max_tokens), 1)
        while len(row) < length:
            t = rng.randrange(top)
            if t not in specials:
                row.append(t)
        ids.append(row)
    return PromptSet(ids=ids, texts=[tokenizer.decode(r) for r in ids], dropped_long=0)


def build_source_setup(source, n_prompts: int, seed: int = 0, reference: bool = True, critic: bool = True,
                       prompt_tokens: tuple[int, int] = PROMPT_WORDS) -> BenchSetup:
    """:func:`build_setup` for ``--model`` (a :class:`tether.bench.shapes.ModelSource`)."""
    tokenizer = source.tokenizer()
    models = build_source_models(source.config, tokenizer, seed, reference, critic)
    prompts = token_prompt_set(tokenizer, source.config.vocab_size, n_prompts, *prompt_tokens, seed=seed)
    return BenchSetup(config_dims(source.config), tokenizer, models, prompts)
