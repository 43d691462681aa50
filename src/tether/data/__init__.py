"""Dataset layer: load raw records, validate them into examples, tokenize and collate."""

from tether.data.records import Record, load_records
from tether.data.schemas import (
    PreferenceExample,
    Prompt,
    PromptExample,
    SFTExample,
    UnpairedExample,
    preference_examples,
    prompt_examples,
    sft_examples,
    unpaired_examples,
)
from tether.data.templates import encode_chat, encode_prompt, encode_response, prompt_text, use_chat_template
from tether.data.tokenize import (
    TokenizedPreference,
    TokenizedSFT,
    TokenizedUnpaired,
    collate_left,
    collate_right,
    tokenize_preference,
    tokenize_sft,
    tokenize_unpaired,
)

__all__ = [
    "Record", "load_records",
    "Prompt", "SFTExample", "PreferenceExample", "PromptExample", "UnpairedExample",
    "sft_examples", "preference_examples", "prompt_examples", "unpaired_examples",
    "use_chat_template", "encode_chat", "encode_prompt", "encode_response", "prompt_text",
    "TokenizedSFT", "TokenizedPreference", "TokenizedUnpaired", "tokenize_sft", "tokenize_preference",
    "tokenize_unpaired",
    "collate_right", "collate_left",
]
