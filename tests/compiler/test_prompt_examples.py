"""In-context examples: labelled rows written into the prefix as earlier turns (no model forward)."""

from __future__ import annotations

import pytest

from decisionflow.compiler import LAYOUTS, compile_rubric, example_answer, render_prompt
from decisionflow.errors import InputError
from decisionflow.spec.rubric import Rubric

RUBRIC = Rubric.model_validate({
    "name": "examples",
    "pin_first": True,
    "fields": {
        "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery"]},
        "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
        "severity": {"kind": "score", "question": "Severity", "min": 0, "max": 9},
    },
})
EXAMPLES = [
    ("I was charged twice.", {"topic": "billing", "urgent": True, "severity": 7}),
    ("Where is my parcel?", {"topic": "delivery", "urgent": "false", "severity": "2"}),
]


@pytest.mark.parametrize("family", ["smollm", "qwen"])
def test_no_examples_gives_exactly_the_previous_prompt(family, request):
    tokenizer = request.getfixturevalue("tokenizer" if family == "smollm" else "qwen_tokenizer")
    plain = compile_rubric(tokenizer, RUBRIC)
    assert compile_rubric(tokenizer, RUBRIC, examples=()).parts == plain.parts
    assert compile_rubric(tokenizer, RUBRIC, examples=()).prefix_tokens == plain.prefix_tokens
    assert render_prompt(tokenizer, RUBRIC, opener="{", examples=[]) == render_prompt(tokenizer, RUBRIC, opener="{")


@pytest.mark.parametrize("family", ["smollm", "qwen"])
def test_examples_are_turns_of_the_prefix_in_order(family, request):
    tokenizer = request.getfixturevalue("tokenizer" if family == "smollm" else "qwen_tokenizer")
    plain = compile_rubric(tokenizer, RUBRIC)
    compiled = compile_rubric(tokenizer, RUBRIC, examples=EXAMPLES)
    layout = compiled.layout
    assert layout is plain.layout
    assert compiled.parts.tail == plain.parts.tail  # only the prefix changes: requests are read the same way
    prefix = compiled.parts.prefix
    answers = [example_answer(layout, RUBRIC, answer) for _, answer in EXAMPLES]
    # Between the system turn (the catalog) and the real user turn, in the given order.
    positions = [prefix.index(part) for part in ("Keys:", "Input:\nI was charged twice.", answers[0],
                                               "Input:\nWhere is my parcel?", answers[1])]
    assert positions == sorted(positions)
    assert prefix.endswith("Input:\n") and prefix.rindex("Input:\n") > positions[-1]
    assert prefix.count("<|im_start|>user\n") == 3 and prefix.count("<|im_start|>assistant\n") == 2
    # The prefix without the example turns is the plain prefix.
    first_user = prefix.index("<|im_start|>user\n")
    assert plain.parts.prefix.startswith(prefix[:first_user])
    assert len(compiled.prefix_tokens) > len(plain.prefix_tokens)
    assert compiled.fields["topic"].answer_lines == plain.fields["topic"].answer_lines


def test_example_answers_are_written_as_the_engine_writes_its_lines():
    before, after = LAYOUTS
    answer = {"severity": 7, "topic": "billing", "urgent": True}  # plan order, not the mapping's
    assert example_answer(before, RUBRIC, answer) == '{\n  "topic": "billing",\n  "urgent": true,\n  "severity": 7,\n}'
    assert example_answer(after, RUBRIC, answer) == '{\n  "topic": "billing",\n  "urgent": true,\n  "severity": 7,\n}'
    assert example_answer(before, RUBRIC, {"topic": "delivery"}) == '{\n  "topic": "delivery",\n}'
    with pytest.raises(InputError, match="not one of its allowed answers"):
        example_answer(before, RUBRIC, {"topic": "returns"})
    with pytest.raises(InputError, match="unknown fields"):
        example_answer(before, RUBRIC, {"colour": "red"})


def test_a_verbatim_answer_text_is_kept_and_markers_are_refused(qwen_tokenizer):
    compiled = compile_rubric(qwen_tokenizer, RUBRIC, examples=[("Hello", '{"topic": "billing"}')])
    assert '<|im_start|>user\nInput:\nHello<|im_end|>\n<|im_start|>assistant\n{"topic": "billing"}<|im_end|>' in compiled.parts.prefix
    with pytest.raises(InputError):
        compile_rubric(qwen_tokenizer, RUBRIC, examples=[("a \u2063INPUT\u2063 b", "{}")])
