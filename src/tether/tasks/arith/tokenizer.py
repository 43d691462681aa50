"""A word-level tokenizer for the arith world, built locally (nothing downloaded).

* model: ``tokenizers`` WordLevel over :data:`~tether.tasks.arith.world.VOCAB_WORDS`
  (every word the world can produce, including all numbers -9..81 and the chat
  words), unknown words map to ``<unk>``;
* pre-tokenizer: whitespace split, so ``-3`` or ``!`` are single words;
* special tokens ``<pad>`` (id 0), ``<unk>`` (1), ``<bos>`` (2), ``<eos>`` (3);
* post-processor: prepends ``<bos>`` when ``add_special_tokens=True``;
* decoder: joins words with single spaces, so ``decode(encode(text))`` gives
  ``text`` back for any whitespace-normalised text of the world;
* chat template: ``<bos>`` then ``ROLE : CONTENT `` per message and, with
  ``add_generation_prompt``, ``assistant :``.  The rendered text already holds
  ``<bos>``; ``apply_chat_template`` tokenizes it with
  ``add_special_tokens=False`` so no second ``<bos>`` appears.  When tokenizing
  rendered chat text yourself, pass ``add_special_tokens=False`` too.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from tether.tasks.arith.world import VOCAB_WORDS

PAD, UNK, BOS, EOS = "<pad>", "<unk>", "<bos>", "<eos>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, UNK, BOS, EOS)
MODEL_MAX_LENGTH = 64

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ message['role'] }} : {{ message['content'] }} "
    "{% endfor %}"
    "{% if add_generation_prompt %}assistant :{% endif %}"
)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """The arith world's word-level tokenizer (deterministic: ids never change)."""
    return word_tokenizer(VOCAB_WORDS)


def word_tokenizer(words: tuple[str, ...], chat_template: str = CHAT_TEMPLATE,
                   model_max_length: int = MODEL_MAX_LENGTH) -> PreTrainedTokenizerFast:
    """A word-level tokenizer over ``words`` (ids: the special tokens, then ``words`` in order), as
    the module docstring describes, with ``chat_template``; other tasks' worlds build theirs here."""
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + tuple(words))}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B",
        special_tokens=[(BOS, vocab[BOS])],
    )
    # WordPiece decoding with a prefix no word has and no cleanup = join with spaces.
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        padding_side="left",
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = chat_template
    return hf
