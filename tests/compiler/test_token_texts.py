"""The fast decoding of a byte-level vocabulary gives exactly what decoding each id gives."""

from __future__ import annotations

from decisionflow.compiler.tokens import token_texts


def _decoded(tokenizer) -> list[str]:
    return tokenizer.batch_decode([[i] for i in range(len(tokenizer))], clean_up_tokenization_spaces=False)


def test_smollm2_vocabulary(tokenizer):
    assert token_texts(tokenizer) == _decoded(tokenizer)


def test_qwen25_vocabulary(qwen_tokenizer):
    assert token_texts(qwen_tokenizer) == _decoded(qwen_tokenizer)
