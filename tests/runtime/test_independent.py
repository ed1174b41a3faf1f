"""Independent questions (`reading: independent`) on the bundled real model: a question's distribution does
not move with the questions asked beside it, their order or their count; the rows are tokenised exactly as
the whole conversation would be; new question sets share one prefix."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
from pydantic import BaseModel

from decisionflow.compiler import compile_independent
from decisionflow.compiler.independent import render_independent
from decisionflow.errors import RubricError
from decisionflow.runtime.engine import Engine
from decisionflow.spec.declare import ask, decision
from decisionflow.spec.plan import make_plan, split_by_tokens
from decisionflow.spec.rubric import Rubric
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

pytestmark = pytest.mark.model

TICKET = "I was charged twice for my March invoice. Please refund the duplicate charge or I will cancel my plan."
QUESTIONS = {
    "refund": {"kind": "boolean", "question": "Whether the customer asks for money back"},
    "team": {"kind": "choice", "question": "Which team handles it",
             "options": {"billing": "charges, invoices", "shipping": "delivery", "returns": "sending goods back"}},
    "severity": {"kind": "score", "question": "How severe the issue is", "min": 0, "max": 4},
    "cancel": {"kind": "boolean", "question": "Whether the customer threatens to cancel"},
    "channel": {"kind": "choice", "question": "Where the money went",
                "options": ["card_payment", "card_payment_fee", "card_delivery", "cash"]},
}


RUBRIC_QUESTION = {name: spec["question"] for name, spec in QUESTIONS.items()}


def questions(names: list[str], **settings) -> Rubric:
    return Rubric(name="questions", reading="independent", debias="none",
                  fields={name: QUESTIONS[name] for name in names}, **settings)


def gap(first, second, names) -> float:
    return max(abs(first.fields[n].probabilities[label] - second.fields[n].probabilities[label])
               for n in names for label in first.fields[n].probabilities)


def test_a_question_reads_the_same_alone_among_others_and_in_any_order(engine: Engine):
    names = list(QUESTIONS)
    together = engine.decide(questions(names), TICKET)
    assert together.stats.forward_passes == 1
    for name in names:
        alone = engine.decide(questions([name]), TICKET)
        assert gap(alone, together, [name]) < 1e-4, name
    reordered = engine.decide(questions(names[::-1]), TICKET)
    assert gap(reordered, together, names) < 1e-4
    some = engine.decide(questions(["team", "refund"]), TICKET)
    assert gap(some, together, ["team", "refund"]) < 1e-4
    # The readings are real: the ticket asks for a refund, and billing handles it.
    assert together.fields["refund"].value is True
    assert together.fields["team"].value == "billing"


def test_the_shared_reading_does_depend_on_the_other_questions(engine: Engine):
    """What independence is for: read shared, one question's distribution moves with the catalog around it."""
    shared = {name: {**spec} for name, spec in QUESTIONS.items()}
    rubric = Rubric(name="shared", debias="none", pin_first=False, fields=shared)
    alone = Rubric(name="shared", debias="none", pin_first=False, fields={"cancel": shared["cancel"]})
    assert gap(engine.decide(rubric, TICKET), engine.decide(alone, TICKET), ["cancel"]) > 1e-3


def test_rows_are_tokenised_as_the_whole_conversation(tokenizer, qwen_tokenizer):
    from decisionflow.compiler import TokenizerView

    rubric = questions(list(QUESTIONS))
    for tok in (tokenizer, qwen_tokenizer):
        view = TokenizerView(tok)
        compiled = compile_independent(tok, rubric, view=view)
        parts, template = render_independent(tok, rubric)
        request = compiled.request_tokens(TICKET)
        assert template.count("\u2063") == 4  # the question and the opener's markers, nothing else
        for name, field in compiled.fields.items():
            pieces = list(compiled.prefix_tokens) + request + list(field.stem)
            # One tokenisation of the whole text gives the same tokens as the pieces the engine packs.
            assert view.encode(view.decode(pieces)) == pieces, (tok.name_or_path, name)
            assert RUBRIC_QUESTION[name] in view.decode(field.stem)
            assert all(line == () for line in field.answer_lines)  # nothing is written for other questions


def test_new_question_sets_share_one_prefix(engine: Engine):
    first = Rubric(name="one", reading="independent", fields={"a": {"kind": "boolean", "question": "Whether it is about money"}})
    second = Rubric(name="two", reading="independent", fields={"b": {"kind": "boolean", "question": "Whether it is polite"}})
    engine.decide(first, TICKET)
    prefilled = engine.prepared.counts.prefixes_prefilled
    decision = engine.decide(second, TICKET)
    assert engine.prepared.counts.prefixes_prefilled == prefilled
    assert decision.stats.prefix_source == "memory"
    assert engine.prepared.peek(first).prefix is engine.prepared.peek(second).prefix


def test_a_large_set_is_cut_into_passes_that_each_see_the_input_only(engine: Engine):
    rubric = questions(list(QUESTIONS))
    compiled, plan = engine.compile(rubric)
    rows = {name: field.row_length for name, field in compiled.fields.items()}
    budget = max(rows.values()) + 1
    split = split_by_tokens(make_plan(rubric), rows, budget)
    assert len(split.rounds) > 1
    assert [n for r in split.rounds for n in r.fields] == list(QUESTIONS)
    prepared = engine.prepared.get(rubric)
    one_pass = engine.decide(rubric, TICKET)
    original = prepared.plan
    prepared.plan = split
    try:
        several = engine.decide(rubric, TICKET)
    finally:
        prepared.plan = original
    assert several.stats.forward_passes == len(split.rounds)
    assert gap(several, one_pass, list(QUESTIONS)) < 1e-4


def test_what_an_independent_reading_cannot_honour_is_refused():
    fields = {"a": {"kind": "boolean", "question": "A"},
              "b": {"kind": "boolean", "question": "B", "after": ["a"], "when": {"a": True}}}
    with pytest.raises(RubricError) as caught:
        loads_rubric(dump_rubric(Rubric(name="r", fields=fields)) + "reading: independent\n")
    message = str(caught.value)
    assert "fields.b.after" in message and "fields.b.when" in message


def test_the_reading_is_written_in_yaml_and_read_back():
    text = "name: r\nreading: independent\nfields:\n  a: {kind: boolean, question: Whether it is spam}\n"
    rubric = loads_rubric(text)
    assert rubric.reading.value == "independent"
    assert "reading: independent" in dump_rubric(rubric)
    assert loads_rubric(dump_rubric(rubric)) == rubric
    assert "reading" not in dump_rubric(Rubric(name="r", fields={"a": {"kind": "boolean", "question": "A"}}))


@decision(reading="independent", instructions="Triage one support ticket.")
class Questions(BaseModel):
    refund: Annotated[bool, ask("Whether the customer asks for money back")]
    team: Annotated[Literal["billing", "shipping", "returns"], ask("Which team handles it")]


def test_a_decorated_class_reads_its_fields_independently_priors_included(engine: Engine):
    """The engine's default correction divides by each field's content-free prior: read per question too."""
    decided = engine.decide(Questions, TICKET)
    assert isinstance(decided.value, Questions)
    assert decided.fields["team"].debias == "content_free"  # the independent reading's default
    alone = Rubric(name="questions", reading="independent", instructions="Triage one support ticket.",
                   fields={"team": {"kind": "choice", "question": "Which team handles it",
                                    "options": ["billing", "shipping", "returns"]}})
    assert gap(engine.decide(alone, TICKET), decided, ["team"]) < 1e-4


def test_a_new_set_reads_its_content_free_prior_in_its_own_pass(engine: Engine):
    """A question set never seen before costs no pass for its prior: the content-free inputs ride in the
    request's own pass, and the prior they give is the one a separate reading gives."""
    import uuid

    from decisionflow.runtime.readout.debias import CONTENT_FREE_BY_READING, mean_distribution

    question = f"Whether the customer asks for money back (set {uuid.uuid4().hex[:8]})"
    rubric = Rubric(name="fresh", reading="independent", fields={"refund": {"kind": "boolean", "question": question}})
    first = engine.decide(rubric, TICKET)
    assert first.stats.forward_passes == 1
    assert first.fields["refund"].debias == "content_free"
    assert "prior_read" not in first.stats.timings_ms
    prepared = engine.prepared.peek(rubric)
    assert prepared.prior_source == "pass"
    again = engine.decide(rubric, TICKET)
    assert gap(first, again, ["refund"]) < 1e-4
    apart = [d.fields["refund"].probabilities for d in engine._read_content_free(rubric, CONTENT_FREE_BY_READING[rubric.reading])]
    expected = mean_distribution([tuple(p[label] for label in ("true", "false")) for p in apart])
    assert max(abs(a - b) for a, b in zip(prepared.content_free["refund"], expected)) < 1e-4


def test_both_vocabularies_take_the_inline_layout_and_the_turns_layout_reads_independently_too(
        engine: Engine, tokenizer, qwen_tokenizer, monkeypatch):
    from decisionflow.compiler import TokenizerView, independent

    rubric = questions(list(QUESTIONS))
    assert independent.question_layout(TokenizerView(tokenizer), rubric) is independent.INLINE
    assert independent.question_layout(TokenizerView(qwen_tokenizer), rubric) is independent.INLINE
    # Where the inline seam is not a token boundary, each question gets a turn of its own after the input's.
    monkeypatch.setattr(independent, "question_layout", lambda view, rubric: independent.TURNS)
    names = ["refund", "team", "severity"]
    turns = Rubric(name="turns", reading="independent", debias="none", fields={n: QUESTIONS[n] for n in names})
    together = engine.decide(turns, TICKET)
    compiled, _ = engine.compile(turns)
    assert "I have read the input." in compiled.parts.tail
    for name in names:
        alone = engine.decide(Rubric(name="turns", reading="independent", debias="none",
                                     fields={name: QUESTIONS[name]}), TICKET)
        assert gap(alone, together, [name]) < 1e-4


def test_a_stored_prior_is_never_read_for_rows_written_another_way(engine: Engine, tmp_path, monkeypatch):
    """The disk store keys a content-free prior by the tokens that read it, not only by the rubric: after a
    change to how a question's row is written (here the layout), the old prior is not found."""
    import torch

    from decisionflow.compiler import independent
    from decisionflow.runtime.prefix_store import PrefixStore
    from decisionflow.runtime.prepared import PreparedRubric

    rubric = questions(["refund", "team"])
    prepared = engine.prepared

    def identity():
        compiled = prepared.compile(rubric)
        return compiled, prepared.prior_identity(PreparedRubric(compiled, prepared.plan(rubric, compiled)), rubric)

    # Two layouts with the same prefix and other rows.
    monkeypatch.setattr(independent, "question_layout", lambda view, rubric: independent.INLINE)
    inline, inline_identity = identity()
    assert identity()[1] == inline_identity  # stable for the same rows
    store = PrefixStore(tmp_path, fingerprint="model", dtype=torch.float32)
    store.save_prior(inline.prefix_tokens, inline_identity, {"refund": (0.7, 0.3)})
    assert store.load_prior(inline.prefix_tokens, inline_identity) == {"refund": (0.7, 0.3)}

    monkeypatch.setattr(independent, "question_layout", lambda view, rubric: independent.TURNS)
    turns, turns_identity = identity()
    assert turns.prefix_tokens == inline.prefix_tokens  # the same prefix, and the same rubric key ...
    assert turns_identity["prepared"] == inline_identity["prepared"]
    assert store.load_prior(turns.prefix_tokens, turns_identity) is None  # ... but other rows: no stale prior
