"""The compiler's layout probe and row cuts on two tokenizer families (no model forward)."""

from __future__ import annotations

import pytest

from decisionflow.bench.qwen_vocabulary import CHATML
from decisionflow.compiler import LAYOUTS, compile_rubric
from decisionflow.compiler.prompt import system_text
from decisionflow.errors import CompileError
from decisionflow.spec.rubric import Rubric

RUBRIC = Rubric.model_validate({
    "name": "layouts",
    "fields": {
        "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery", "time", "timer"]},
        "refund": {"kind": "boolean", "question": "Refund asked"},
        "hours": {"kind": "choice", "question": "Deadline", "options": ["1_HOUR", "12_HOURS", "1_WEEK", "NONE"]},
        "urgency": {"kind": "score", "question": "Urgency", "min": 0, "max": 12},
    },
})


def _tokens(tokenizer, ids):
    return tokenizer.convert_ids_to_tokens(list(ids))


def test_qwen_puts_the_newline_after_the_line(qwen_tokenizer):
    compiled = compile_rubric(qwen_tokenizer, RUBRIC)
    assert compiled.layout is LAYOUTS[1]
    assert compiled.parts.tail.endswith("{\n")
    topic = compiled.fields["topic"]
    # The closing quote, comma and newline are one token, and it belongs to the line.
    assert _tokens(qwen_tokenizer, topic.answer_lines[0])[-1] == '",Ċ'
    assert _tokens(qwen_tokenizer, compiled.fields["refund"].answer_lines[0])[-2:] == ["Ġtrue", ",Ċ"]
    # The row ends where the candidates diverge: after the opening quote of the value.
    assert _tokens(qwen_tokenizer, topic.stem)[-1] == 'Ġ"'


def test_smollm_puts_the_newline_before_the_line(tokenizer):
    compiled = compile_rubric(tokenizer, RUBRIC)
    assert compiled.layout is LAYOUTS[0]
    assert compiled.parts.tail.endswith("{")
    refund = compiled.fields["refund"]
    assert _tokens(tokenizer, refund.stem)[0] == "ĊĠ"
    assert _tokens(tokenizer, refund.stem)[-1] == '":'
    assert _tokens(tokenizer, refund.answer_lines[0])[-2:] == ["Ġtrue", ","]


@pytest.mark.parametrize("family", ["smollm", "qwen"])
def test_shared_prefix_labels_are_followed(family, tokenizer, qwen_tokenizer):
    tok = tokenizer if family == "smollm" else qwen_tokenizer
    compiled = compile_rubric(tok, RUBRIC)
    hours = compiled.fields["hours"]
    # 1_HOUR, 12_HOURS and 1_WEEK share the token `1`: a second read tells them apart.
    assert hours.method == "branch" and len(hours.read_positions) >= 2
    for field in compiled.fields.values():
        reachable = set()
        stack = [field.root]
        while stack:
            node = stack.pop()
            reachable |= node.values
            stack.extend(node.children.values())
        assert reachable == set(range(len(field.values)))


def test_catalog_lists_every_allowed_value():
    text = system_text(RUBRIC)
    for spec in RUBRIC:
        for value in spec.values:
            literal = ("true" if value else "false") if isinstance(value, bool) else (
                str(value) if isinstance(value, int) else f'"{value}"')
            assert literal in text, (spec.name, value)


def test_chat_template_gets_the_models_arguments(qwen_tokenizer):
    from decisionflow.compiler.prompt import render_prompt

    probe = qwen_tokenizer.__class__(tokenizer_object=qwen_tokenizer.backend_tokenizer)
    # Qwen3's template opens a thinking block unless told otherwise; the engine must say so.
    probe.chat_template = "{{ 'thinking=' ~ enable_thinking ~ ' ' }}" + CHATML
    parts = render_prompt(probe, RUBRIC, opener="{")
    assert parts.prefix.startswith("thinking=False ")
    parts = render_prompt(qwen_tokenizer, RUBRIC, opener="{\n")
    assert parts.prefix.startswith("<|im_start|>system\n")
    assert "You are Qwen" not in parts.prefix and "JSON object" in parts.prefix


def test_indistinguishable_labels_are_refused(tokenizer):
    """A tokenizer that strips accents cannot tell `café` from `cafe`: refuse, don't guess."""
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast

    backend = tokenizer.backend_tokenizer.__class__.from_str(tokenizer.backend_tokenizer.to_str())
    backend.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])
    folding = PreTrainedTokenizerFast(tokenizer_object=backend)
    folding.chat_template = tokenizer.chat_template
    rubric = Rubric.model_validate({
        "name": "accents",
        "fields": {"drink": {"kind": "choice", "question": "Drink", "options": ["café", "cafe", "tea"]}},
    })
    with pytest.raises(CompileError, match="cannot be told apart"):
        compile_rubric(folding, rubric)
