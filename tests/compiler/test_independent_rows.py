"""How an independent question's row is written: the default row quotes options as the catalog does; the bare
row (measured, not a default) writes string options bare where that names each one unambiguously, and keeps the
quoted form elsewhere. Tokenizers only, no model forward."""

from __future__ import annotations

import pytest

from decisionflow.compiler import independent
from decisionflow.compiler.independent import INLINE, INLINE_BARE, compile_independent, question_text
from decisionflow.compiler.tokens import TokenizerView
from decisionflow.spec.rubric import Catalog, Rubric

FIELDS = {
    "refund": {"kind": "boolean", "question": "Whether a refund is asked for"},
    "team": {"kind": "choice", "question": "Which team handles it",
             "options": {"billing": "money, invoices", "shipping": "parcels", "general_support": ""}},
    "tone": {"kind": "choice", "question": "The customer's tone", "options": ["angry", "calm"]},
}
RUBRIC = Rubric.model_validate({"name": "rows", "reading": "independent", "instructions": "You triage tickets.",
                                "fields": FIELDS})


def _row(fields: dict, name: str, layout=INLINE_BARE, **rubric) -> str:
    built = Rubric.model_validate({"name": "one", "reading": "independent", "fields": fields, **rubric})
    return question_text(built.fields[name], built, Catalog.FULL, layout)


def test_the_row_writes_string_options_bare_and_a_yes_no_question_with_its_answers():
    # A yes/no row without its answers read one answer for every input (docs/engine.md): they stay.
    assert _row(FIELDS, "refund") == " Whether a refund is asked for. Allowed: true | false"
    assert _row(FIELDS, "refund", INLINE) == _row(FIELDS, "refund")
    assert _row(FIELDS, "tone") == " The customer's tone. Allowed: angry | calm"
    assert _row(FIELDS, "tone", INLINE) == ' The customer\'s tone. Allowed: "angry" | "calm"'
    # Descriptions follow their option, bare too; an option without one gets no line.
    assert _row(FIELDS, "team") == (" Which team handles it. Allowed: billing | shipping | general_support\n"
                                    "    billing: money, invoices\n    shipping: parcels")


@pytest.mark.parametrize("options", [
    ["yes", "true"],            # bare `true` would read as the boolean
    ["low", "3"],               # ... `3` as a number
    ["none", "null"],           # ... `null` as null
    ["a | b", "c"],             # a bar would split one option in two
    ['say "hi"', "bye"],        # an inner quote is escaped in JSON: the literal is more than quotes around it
])
def test_options_stay_quoted_where_bare_text_would_name_another_value(options):
    row = _row({"pick": {"kind": "choice", "question": "Pick", "options": options}}, "pick")
    assert row == _row({"pick": {"kind": "choice", "question": "Pick", "options": options}}, "pick", INLINE)
    assert '"' in row.split("Allowed:")[1]


def test_values_written_as_json_literals_or_ids_keep_the_catalogs_form():
    literals = {"level": {"kind": "choice", "question": "Priority", "options": ["1", "2", "high"],
                          "literals": {"1": 1, "2": 2}}}
    assert _row(literals, "level") == _row(literals, "level", INLINE)
    ids = {"team": {"kind": "choice", "question": "Which team", "options": ["billing", "shipping"]}}
    assert _row(ids, "team", answer_format="ids") == _row(ids, "team", INLINE, answer_format="ids")
    score = {"severity": {"kind": "score", "question": "How severe", "min": 0, "max": 3}}
    assert _row(score, "severity") == _row(score, "severity", INLINE)


@pytest.fixture(params=["smollm", "qwen"])
def view(request):
    return TokenizerView(request.getfixturevalue("tokenizer" if request.param == "smollm" else "qwen_tokenizer"))


def test_bare_rows_are_shorter_and_share_the_prefix(view, monkeypatch):
    monkeypatch.setattr(independent, "DEFAULT_INLINE", INLINE_BARE)
    bare = compile_independent(view.tokenizer, RUBRIC, view=view)
    monkeypatch.undo()
    listed = compile_independent(view.tokenizer, RUBRIC, view=view)  # the default: options quoted
    assert bare.prefix_tokens == listed.prefix_tokens  # one cached prefix whichever rows follow it
    for name in FIELDS:
        shorter = len(bare.fields[name].row_tokens) < len(listed.fields[name].row_tokens)
        assert shorter == (RUBRIC.fields[name].kind.value == "choice"), name
        # The row's lead decodes to the question as written, then the turn's end and the answer's opener.
        lead = view.decode(list(bare.fields[name].stem))
        assert question_text(RUBRIC.fields[name], RUBRIC, Catalog.FULL, INLINE_BARE).strip() in lead
