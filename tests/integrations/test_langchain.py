"""The LangChain decision model (`decisionflow.integrations.langchain`): the contract `BaseDecisionModel`
documents, answered by the bundled real model in float32. Answers equal the engine's own for the converted
rubric, an answer does not move with the questions beside it, what the engine cannot read is refused naming
where it is, and usage counts what the model read. `langchain-tests` has no standard tests for decision
models (docs/decisions.md), so the contract is tested here directly."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
import threading
from pathlib import Path

import pytest
from langchain_core.decisions import (
    BaseDecisionModel,
    Box,
    Choice,
    ChoiceAnswer,
    ClassifierResponse,
    Noul,
    NoulAnswer,
    NoulCriteria,
    Score,
    ScoreAnswer,
)
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from pydantic import ValidationError

from decisionflow.errors import InputError, RubricError
from decisionflow.integrations.langchain import BUNDLED_PREFIX, DecisionflowDecisions, decision_input, question_set
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.model.loading import bundled_gguf
from decisionflow.spec.rubric import Rubric

ROOT = Path(__file__).resolve().parents[2]
TICKET = "I was charged twice for my March invoice. Please refund the duplicate charge or I will cancel my plan."
QUESTIONS = {
    "refund": Noul(instructions="Does the customer ask for money back?"),
    "team": Choice(instructions="Which team should handle this request?",
                   criteria={"billing": "Payment, invoice, or subscription issues.",
                             "technical": "Product bugs or integration failures.",
                             "sales": "Pricing or purchasing questions."}),
    "frustration": Score(instructions="How frustrated does the customer appear?",
                         criteria=["Calm and neutral.", "Concerned but civil.", "Very angry or using strong language."]),
}
"""The questions of docs/decisions.md's example, so the suite prepares their rubric once."""

# The route packs a question's row with other rows than a direct call does (the content-free prior, other
# requests): float32 sums them in another order, a few parts in a million.
PASS_ROUNDING = 1e-5


@pytest.fixture(scope="module")
def decisions(engine: Engine) -> DecisionflowDecisions:
    return DecisionflowDecisions(engine=engine)


@pytest.fixture(scope="module")
def together(decisions: DecisionflowDecisions) -> ClassifierResponse:
    return decisions.invoke({"state": TICKET, "questions": QUESTIONS})


# -- answers on the real model --------------------------------------------------------------------------


@pytest.mark.model
def test_every_question_type_is_answered_as_the_engine_answers_the_converted_rubric(engine, decisions, together):
    assert isinstance(decisions, BaseDecisionModel)
    assert together.model == decisions.model == engine.loaded.name
    assert list(together.answers) == list(QUESTIONS)  # the request's order
    refund, team, frustration = (together.answers[q] for q in QUESTIONS)
    assert isinstance(refund, NoulAnswer) and isinstance(team, ChoiceAnswer) and isinstance(frustration, ScoreAnswer)
    assert together.nouls == {"refund": refund} and together.choices == {"team": team}
    assert together.scores == {"frustration": frustration}

    asked = question_set(QUESTIONS)
    decision = engine.decide(asked.rubric, TICKET)
    fields = {qid: decision.fields[asked.field_of[qid]] for qid in QUESTIONS}
    assert refund.noul == pytest.approx(fields["refund"].probabilities["true"], abs=PASS_ROUNDING)
    assert set(team.probabilities) == set(QUESTIONS["team"].criteria)
    assert team.probabilities == pytest.approx(fields["team"].probabilities, abs=PASS_ROUNDING)
    assert sum(team.probabilities.values()) == pytest.approx(1, abs=1e-6)
    assert team.confidence == team.probabilities[team.choice] == max(team.probabilities.values())
    # The readings are real: the ticket is about an invoice.
    assert team.choice == "billing"
    assert frustration.legend == dict(enumerate(QUESTIONS["frustration"].criteria))
    assert set(frustration.probabilities) == {0, 1, 2}
    assert sum(frustration.probabilities.values()) == pytest.approx(1, abs=1e-6)
    assert frustration.score == pytest.approx(sum(level * p for level, p in frustration.probabilities.items()), abs=1e-9)
    assert frustration.score == pytest.approx(fields["frustration"].expected_value, abs=PASS_ROUNDING)
    assert frustration.confidence == max(frustration.probabilities.values())

    # Usage: what the model read (prefix, input, question rows), nothing generated. The prefix was prefilled for
    # this request only if no earlier one (or the disk store) had it.
    stats = decision.stats
    assert stats.tokens_prefilled > stats.input_tokens  # the rows are read after the input
    read = stats.prefix_tokens + stats.tokens_prefilled
    usage = dict(together.usage)
    details = usage.pop("input_token_details")
    assert usage == {"input_tokens": read, "output_tokens": 0, "total_tokens": read}
    assert details in ({"cache_read": stats.prefix_tokens}, {"cache_creation": stats.prefix_tokens})


@pytest.mark.model
def test_the_converted_rubric_is_a_plain_independent_rubric(engine):
    """What the engine is asked is exactly a rubric a person could write: LangChain adds nothing hidden."""
    written = Rubric(name="langchain_decisions", reading="independent", fields={
        "frustration": {"kind": "score", "question": "How frustrated does the customer appear?", "min": 0, "max": 2,
                        "options": {"0": "Calm and neutral.", "1": "Concerned but civil.",
                                    "2": "Very angry or using strong language."}},
        "refund": {"kind": "boolean", "question": "Does the customer ask for money back?"},
        "team": {"kind": "choice", "question": "Which team should handle this request?",
                 "options": {"billing": "Payment, invoice, or subscription issues.",
                             "technical": "Product bugs or integration failures.",
                             "sales": "Pricing or purchasing questions."}},
    })
    assert question_set(QUESTIONS).rubric == written


@pytest.mark.model
def test_an_answer_does_not_move_with_the_questions_beside_it(engine, decisions, together):
    alone = {qid: decisions.invoke({"state": TICKET, "questions": {qid: question}}) for qid, question in QUESTIONS.items()}
    for qid, response in alone.items():
        assert _gap(response.answers[qid], together.answers[qid]) < 1e-4, qid
    reordered = decisions.invoke({"state": TICKET, "questions": dict(reversed(QUESTIONS.items()))})
    assert list(reordered.answers) == list(QUESTIONS)[::-1]
    for qid in QUESTIONS:
        assert _gap(reordered.answers[qid], together.answers[qid]) < 1e-4, qid
    # Usage is what the model read. Alone, a question reads the prefix, the input and its own row; together,
    # the questions read the prefix and the input once, their rows packed as a tree that reads once any
    # opening tokens the rows share (none here: each row opens with its own question).
    compiled, _ = engine.compile(question_set(QUESTIONS).rubric)
    prefix, request = len(compiled.prefix_tokens), len(compiled.request_tokens(TICKET))
    rows = {qid: compiled.fields[name].row_length for qid, name in question_set(QUESTIONS).field_of.items()}
    for qid, response in alone.items():
        assert response.usage["input_tokens"] == prefix + request + rows[qid], qid
    assert max(rows.values()) < together.usage["input_tokens"] - prefix - request <= sum(rows.values())
    # The second request of a question set finds the prefix in the engine's cache.
    assert reordered.usage == {**together.usage, "input_token_details": {"cache_read": prefix}}


def _gap(first, second) -> float:
    if isinstance(first, NoulAnswer):
        return abs(first.noul - second.noul)
    assert first.probabilities.keys() == second.probabilities.keys()
    return max(abs(first.probabilities[k] - second.probabilities[k]) for k in first.probabilities)


@pytest.mark.model
def test_ainvoke_answers_off_the_event_loop_as_invoke_does(engine):
    threads: list[int] = []

    class Watched(DecisionflowDecisions):
        def get_engine(self):
            threads.append(threading.get_ident())
            return super().get_engine()

    watched = Watched(engine=engine)
    conversation = [HumanMessage("Stripe fails whenever I connect my account."),
                    AIMessage("Sorry about that. I am looking into it now.")]

    async def ask():
        return threading.get_ident(), await watched.ainvoke({"state": conversation, "questions": QUESTIONS})

    loop_thread, answered = asyncio.run(ask())
    assert threads and threads[-1] != loop_thread
    # LangChain's messages are read as the same conversation written as {role, content} objects.
    plain = [{"role": "user", "content": conversation[0].content}, {"role": "assistant", "content": conversation[1].content}]
    assert watched.invoke({"state": plain, "questions": QUESTIONS}).answers == answered.answers


# -- refusals -------------------------------------------------------------------------------------------


def test_a_box_question_is_refused_in_one_line_naming_it(decisions_without_model):
    for box in (Box(instructions="the company logo"), {"type": "box", "instructions": "the company logo"}):
        with pytest.raises(RubricError) as caught:
            decisions_without_model.invoke({"state": TICKET, "questions": {"refund": QUESTIONS["refund"], "where": box}})
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith("questions['where']: a Box question")


@pytest.fixture
def decisions_without_model(monkeypatch) -> DecisionflowDecisions:
    """A decision model whose engine must never load: refusals come before the model is needed."""

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded for a request that is refused")

    monkeypatch.setattr(Engine, "load", classmethod(no_load))
    return DecisionflowDecisions()


@pytest.mark.parametrize(("questions", "where", "says"), [
    ({}, "questions", "at least one question"),
    ({"x": "Is it spam?"}, "questions['x']", "a str is not a question"),
    ({"x": {"type": "noul"}}, "questions['x'].instructions", "Field required"),
    ({"x": {"type": "poll", "instructions": "?"}}, "questions['x']", "a Noul, a Choice or a Score"),
    ({"team": Choice(instructions="Which team", criteria={"billing": None})}, "questions['team'].criteria",
     "at least two options"),
    ({"team": Choice(instructions="Which team", criteria={"billing": None, "": None})}, "questions['team'].criteria", "empty"),
    ({"team": Choice(instructions="Which team", criteria={"Billing": None, "billing": None})}, "questions['team'].criteria",
     "identical after normalisation"),
    ({"team": Choice(instructions="Which team", criteria={" billing": None, "sales": None})}, "questions['team'].criteria",
     "whitespace"),
    ({"level": Score(instructions="How bad", criteria=list(range(102)))}, "questions['level'].criteria", "at most 101"),
    ({"q": Noul(instructions="   ")}, "questions['q'].instructions", "the question is empty"),
    ({"q": Noul(instructions=[{"type": "image", "url": "https://example.com/a.png"}])}, "questions['q'].instructions[0]",
     "media block"),
])
def test_what_cannot_be_asked_is_refused_naming_the_question(decisions_without_model, questions, where, says):
    with pytest.raises(RubricError) as caught:
        decisions_without_model.invoke({"state": TICKET, "questions": questions})
    assert str(caught.value).startswith(f"{where}: "), str(caught.value)
    assert says in str(caught.value)


def test_every_problem_of_a_question_set_is_reported_at_once():
    with pytest.raises(RubricError) as caught:
        question_set({"where": Box(instructions="the logo"), "team": Choice(instructions="Which", criteria={"a": None}),
                      "ok": QUESTIONS["refund"]})
    assert sorted(p.location for p in caught.value.problems) == ["questions['team'].criteria", "questions['where']"]


@pytest.mark.parametrize(("state", "says"), [
    ([HumanMessage("Look at this."), HumanMessage(content=[{"type": "text", "text": "My card:"},
                                                           {"type": "image", "url": "https://example.com/card.png"}])],
     "state[1] (human message), content part 1: a block of type 'image'; decisionflow reads a message's text parts and tool calls only"),
    (HumanMessage(content=["Hear this", {"type": "audio", "base64": "AAAA", "mime_type": "audio/wav"}]),
     "state (human message), content part 1: a block of type 'audio'"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}],
     "state[0], content part 0: a block of type 'image_url'"),
    (AIMessage(content=[{"type": "reasoning", "reasoning": "hm"}, {"type": "text", "text": "Done."}]),
     "state (ai message), content part 0: a block of type 'reasoning'"),
    ({"ticket": {"attachments": [{"type": "image", "base64": "AAAA", "mime_type": "image/png"}]}},
     "state['ticket']['attachments'][0]: a block of type 'image'"),
    ({"ticket": b"raw bytes"}, "state['ticket'] is bytes, not text"),
    ({"ticket": {1, 2}}, "state['ticket']: a set is not text"),
])
def test_what_the_engine_cannot_read_in_the_state_is_refused_naming_where(decisions_without_model, state, says):
    with pytest.raises(InputError) as caught:
        decisions_without_model.invoke({"state": state, "questions": QUESTIONS})
    assert str(caught.value).startswith(says), str(caught.value)


# -- the state and the questions, converted -------------------------------------------------------------


def test_langchain_messages_become_role_and_content():
    calls = [{"name": "lookup_order", "args": {"order": 42}, "id": "call_1"}]
    state = [
        SystemMessage("You are a support agent."),
        HumanMessage(content=[{"type": "text", "text": "Where is "}, "order 42?"]),
        AIMessage(content="", tool_calls=calls),
        ToolMessage(content="shipped on May 2", tool_call_id="call_1"),
        AIMessage(content="It shipped on May 2.", tool_calls=calls),
        ChatMessage(role="supervisor", content="Close the ticket."),
    ]
    assert decision_input(state) == [
        {"role": "system", "content": "You are a support agent."},
        {"role": "user", "content": "Where is order 42?"},
        {"role": "assistant", "content": 'tool call: {"name": "lookup_order", "args": {"order": 42}}'},
        {"role": "tool", "content": "shipped on May 2"},
        {"role": "assistant", "content": 'It shipped on May 2.\ntool call: {"name": "lookup_order", "args": {"order": 42}}'},
        {"role": "supervisor", "content": "Close the ticket."},
    ]
    assert state[1].text == decision_input(state)[1]["content"]  # parts joined as LangChain joins them
    # Tool calls given as standard content parts are written from there, once.
    blocks = AIMessage(content=[{"type": "text", "text": "Checking."},
                                {"type": "tool_call", "id": "call_2", "name": "lookup_order", "args": {"order": 7}}])
    assert decision_input([blocks]) == [
        {"role": "assistant", "content": 'Checking.\ntool call: {"name": "lookup_order", "args": {"order": 7}}'}]
    assert decision_input(HumanMessage("Hi")) == [{"role": "user", "content": "Hi"}]
    assert decision_input(TICKET) == TICKET


def test_messages_inside_json_state_are_written_as_objects():
    state = {"customer": "Dana", "plan": ("pro", 49.0, True, None), "messages": [HumanMessage("Refund me."), AIMessage("Done.")]}
    assert decision_input(state) == {"customer": "Dana", "plan": ["pro", 49.0, True, None],
                                     "messages": [{"role": "user", "content": "Refund me."},
                                                  {"role": "assistant", "content": "Done."}]}
    plain_text_file = {"type": "text-plain", "text": "invoice 12", "mime_type": "text/plain"}
    assert decision_input({"attachment": plain_text_file}) == {"attachment": plain_text_file}
    nested: list = []
    for _ in range(150):
        nested = [nested]
    with pytest.raises(InputError, match="more than 100 levels deep"):
        decision_input({"deep": nested})


def test_question_sets_become_rubrics_by_content():
    shuffled = dict(reversed(QUESTIONS.items()))
    assert question_set(shuffled).rubric == question_set(QUESTIONS).rubric  # one rubric whatever the order
    wire = {qid: question.model_dump() for qid, question in QUESTIONS.items()}
    assert question_set(wire).rubric == question_set(QUESTIONS).rubric  # the wire dicts are the same questions

    asked = question_set({"is spam?": Noul(instructions="Is it spam?",
                                           criteria=NoulCriteria(true="an unsolicited offer", false=None)),
                          "1": Choice(instructions={"ask": "which plan", "context": ["billing"]},
                                      criteria={"true": {"means": "yes"}, "false": "no\n  never"})})
    assert asked.field_of == {"is spam?": "is_spam", "1": "q_1"}
    spam, plan = asked.rubric.fields["is_spam"], asked.rubric.fields["q_1"]
    assert spam.question == "Is it spam? (true: an unsolicited offer)"
    assert plan.question == '{"ask": "which plan", "context": ["billing"]}'
    assert plan.options == {"true": '{"means": "yes"}', "false": "no never"}  # string labels, even "true"
    assert asked.rubric.reading.value == "independent"


def test_the_model_loads_on_first_use_and_is_named_as_the_engine_names_it(monkeypatch):
    loads: list[tuple] = []
    sentinel = object()

    def load(cls, model=None, **options):
        loads.append((model, options))
        return sentinel

    monkeypatch.setattr(Engine, "load", classmethod(load))
    bundled = DecisionflowDecisions(dtype="float32")
    assert bundled.model == BUNDLED_PREFIX + bundled_gguf().name and not loads
    assert bundled.get_engine() is sentinel and bundled.get_engine() is sentinel
    assert loads == [(None, {"device": "auto", "dtype": "float32"})]
    assert DecisionflowDecisions(model="./my-model").get_engine() is sentinel
    assert loads[-1] == ("./my-model", {"device": "auto", "dtype": "auto"})
    assert bundled._provider == "decisionflow"
    with pytest.raises(ValidationError, match="a decisionflow Engine"):
        DecisionflowDecisions(engine="the bundled model")


# -- the docs -------------------------------------------------------------------------------------------


@pytest.mark.model
def test_the_docs_example_prints_what_the_docs_say(engine, monkeypatch):
    text = (ROOT / "docs" / "decisions.md").read_text(encoding="utf-8")
    section = text.split("## LangChain, in process", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    printed = re.search(r"prints, .*?```text\n(.*?)```", section, re.DOTALL).group(1)
    monkeypatch.setattr(Engine, "load", classmethod(lambda cls, *args, **kwargs: engine))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/decisions.md", "exec"), {"__name__": "docs_example"})
    assert out.getvalue() == printed
    assert "questions['where']: a Box question" in section and "content part 1: a block of type 'image'" in section
