"""Rubrics that read a conversation as the chat template's own turns (`input_turns`, what Chat Completions
requests are decided as) and choice options written as JSON values (`literals`): prompt, rows, tokens.
Tokenizers only (SmolLM2's and Qwen2.5's templates), no model forward."""

from __future__ import annotations

import pytest

from decisionflow.compiler import compile_rubric
from decisionflow.compiler.prompt import catalog_entry, render_prompt
from decisionflow.errors import InputError
from decisionflow.spec.rubric import AnswerFormat, Rubric

FIELDS = {
    "team": {"kind": "choice", "question": "Which team", "options": ["billing", "shipping"]},
    "level": {"kind": "choice", "question": "Priority", "options": ["1", "2", "3", "null"],
              "literals": {"1": 1, "2": 2, "3": 3, "null": None}},
    "refund": {"kind": "boolean", "question": "Whether a refund is asked for"},
}
TURNS = Rubric.model_validate({"name": "turns", "instructions": "You triage tickets.", "input_turns": True, "fields": FIELDS})
DATA = Rubric.model_validate({"name": "turns", "instructions": "You triage tickets.", "fields": FIELDS})
CONVERSATION = [
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "How can I help?"},
    {"role": "user", "content": "I was charged twice; refund the duplicate."},
]


@pytest.fixture(params=["smollm", "qwen"])
def tokenizer_of(request):
    return request.getfixturevalue("tokenizer" if request.param == "smollm" else "qwen_tokenizer")


def template_text(tokenizer, compiled, messages) -> str:
    """The whole prompt as the model's own template writes the conversation, ending with the JSON opener."""
    system = {"role": "system", "content": compiled.parts.before_input[0]["content"]}
    return tokenizer.apply_chat_template([system, *messages, {"role": "assistant", "content": compiled.layout.opener}],
                                         tokenize=False, continue_final_message=True, enable_thinking=False)


def test_literal_options_are_written_as_json_values():
    spec = TURNS.fields["level"]
    assert catalog_entry(spec, AnswerFormat.LABELS) == '- "level": Priority. Allowed: 1 | 2 | 3 | null'
    assert catalog_entry(TURNS.fields["team"], AnswerFormat.LABELS).endswith('Allowed: "billing" | "shipping"')


def test_literal_lines_are_bare_and_their_quoted_spelling_is_summed(tokenizer_of):
    compiled = compile_rubric(tokenizer_of, TURNS)
    field = compiled.fields["level"]
    lines = [compiled.view.decode(line) for line in field.answer_lines]
    assert [line.strip().rstrip(",") for line in lines] == ['"level": 1', '"level": 2', '"level": 3', '"level": null']
    assert sorted(index for index, _ in field.paths).count(3) == 2  # null and "null"
    assert len({index for index, _ in field.paths}) == 4


def test_a_rubric_that_reads_turns_takes_the_users_words_as_they_are(tokenizer_of):
    turns, data = compile_rubric(tokenizer_of, TURNS), compile_rubric(tokenizer_of, DATA)
    assert turns.parts.tail == data.parts.tail  # the answer object is read after the same closing
    assert data.parts.prefix.endswith("Input:\n") and not turns.parts.prefix.endswith("Input:\n")
    assert turns.parts.prefix == data.parts.prefix[: -len("Input:\n")]


@pytest.mark.parametrize("payload", ["I was charged twice; refund the duplicate.", CONVERSATION])
def test_the_request_is_the_templates_own_rendering_of_the_conversation(tokenizer_of, payload):
    compiled = compile_rubric(tokenizer_of, TURNS)
    messages = [{"role": "user", "content": payload}] if isinstance(payload, str) else payload
    expected = template_text(tokenizer_of, compiled, messages)
    assert compiled.view.decode([*compiled.prefix_tokens, *compiled.request_tokens(payload)]) == expected


@pytest.mark.parametrize(("payload", "says"), [
    ([{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}], "system message"),
    ([{"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "hi"}], "begins with a user turn"),
    ([{"role": "user", "content": "  "}], "empty"),
    ([{"role": "tool", "content": "42"}], "not one a turn may have"),
    ([], "non-empty list"),
    ({"role": "user", "content": "hi"}, "non-empty list"),
    ([{"role": "user", "content": "hi \u2063OPEN\u2063"}], "internal markers"),
])
def test_a_conversation_that_cannot_be_read_as_turns_is_refused(tokenizer, payload, says):
    compiled = compile_rubric(tokenizer, TURNS)
    with pytest.raises(InputError, match=says):
        compiled.request_tokens(payload)


def test_examples_in_a_rubric_that_reads_turns_are_turns_without_the_input_label(tokenizer):
    rubric = Rubric.model_validate({**TURNS.model_dump(), "examples": [{"text": "Parcel lost", "answers": {"team": "shipping"}}]})
    prefix = render_prompt(tokenizer, rubric, opener="{", examples=[("Parcel lost", '{"team": "shipping"}')]).prefix
    assert "<|im_start|>user\nParcel lost<|im_end|>" in prefix and "Input:" not in prefix
