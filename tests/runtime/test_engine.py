"""The engine on the bundled real model: packing, passes, traps, typed results."""

from __future__ import annotations

from typing import Annotated, Literal

import pytest
import torch
from pydantic import BaseModel, Field
from suite_support import packed_and_alone

from decisionflow.compiler import ReadMode
from decisionflow.errors import InputError
from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.runtime.readout.readout import read_field
from decisionflow.spec.declare import ask, decision
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

TICKET = "I was charged twice for my March invoice. Please refund the duplicate charge, I am really annoyed."


@decision(instructions="Triage one customer support ticket.")
class Triage(BaseModel):
    department: Annotated[
        Literal["billing", "shipping", "returns"],
        ask("Which team handles it", options={
            "billing": "charges, invoices, refunds", "shipping": "delivery and tracking",
            "returns": "sending goods back"}),
    ]
    refund_requested: Annotated[bool, ask("Whether the customer asks for money back")]
    severity: Annotated[int, ask("How severe the issue is"), Field(ge=0, le=9)]
    sentiment: Annotated[Literal["negative", "neutral", "positive"], ask("The customer's mood")]
    wants_callback: Annotated[bool, ask("Whether the customer asks to be called back")]
    escalate: Annotated[bool | None, ask("Whether a human must review it", after=["severity"], when={"department": ["billing"]})] = None
    refund_channel: Annotated[bool | None, ask("Whether the refund goes to the original card", when={"department": ["shipping"]})] = None


FLAT = Rubric.model_validate({
    "name": "flat",
    "instructions": "Judge one support ticket.",
    "fields": {
        "topic": {"kind": "choice", "question": "What the ticket is about", "options": ["billing", "delivery", "account_access"]},
        "refund": {"kind": "boolean", "question": "Whether the customer asks for money back"},
        "angry": {"kind": "boolean", "question": "Whether the customer is angry"},
        "urgency": {"kind": "score", "question": "How urgent, 0 to 12", "min": 0, "max": 12},
        "timing": {"kind": "choice", "question": "When the problem started", "options": ["time", "timer", "timezone", "today_morning", "today_evening"]},
        "channel": {"kind": "choice", "question": "Where it was sent", "options": ["card_payment", "card_payment_fee", "card_delivery", "cash"]},
    },
})


def test_packed_rows_match_each_row_run_alone(engine: Engine):
    compiled, _ = engine.compile(FLAT)
    pairs = packed_and_alone(engine, compiled, TICKET)
    assert len(pairs) > len(compiled.fields)  # some fields need more than one read
    worst = max(float((packed - alone).abs().max()) for packed, alone in pairs)
    # fp32 on CPU: packing reorders sums only; the measured gap is ~1e-5 in log space.
    assert worst < 2e-3, worst


def test_prefix_cache_is_not_changed_by_a_request(engine: Engine):
    engine.decide(FLAT, TICKET)
    compiled, _ = engine.compile(FLAT)
    prepared = next(p for p in engine.prepared.values() if p.compiled is compiled)
    before = [(k.clone(), v.clone()) for k, v in prepared.prefix.kv]
    engine.decide(FLAT, "My parcel never arrived.")
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(prepared.prefix.kv, before))
    assert prepared.prefix.kv[0][0].shape[-2] == len(compiled.prefix_tokens)


def test_two_passes_whatever_the_field_count(engine: Engine):
    result = engine.decide(FLAT, TICKET)
    assert result.stats.forward_passes == 2
    assert [f.round for f in result.fields.values()] == [0, 1, 1, 1, 1, 1]
    unpinned = Engine(engine.loaded, options=EngineOptions(pin_first=False)).decide(FLAT, TICKET)
    assert unpinned.stats.forward_passes == 1


def test_dependency_rounds_add_one_pass_each(engine: Engine):
    result = engine.decide(Triage, TICKET)
    _, plan = engine.compile(Triage)
    assert result.stats.forward_passes == len(plan.rounds) == 3


def test_typed_value_and_distributions(engine: Engine):
    result = engine.decide(Triage, TICKET)
    assert isinstance(result.value, Triage)
    Triage.model_validate(result.value.model_dump())
    for name, field in result.fields.items():
        if not field.asked:
            assert getattr(result.value, name) is None and field.value is None and field.reason
            continue
        assert sum(field.probabilities.values()) == pytest.approx(1.0, abs=1e-9)
        assert 0.0 < field.candidate_mass <= 1.0
        assert getattr(result.value, name) == field.value
    severity = result.fields["severity"]
    assert set(severity.probabilities) == {str(i) for i in range(10)}
    expected = sum(int(k) * p for k, p in severity.probabilities.items())
    assert severity.expected_value == pytest.approx(expected)
    # Exactly one of the two conditional fields can be asked, depending on the department.
    assert result.fields["escalate"].asked == (result.value.department == "billing")
    assert result.fields["refund_channel"].asked == (result.value.department == "shipping")


def test_same_input_twice_gives_identical_numbers(engine: Engine):
    first = engine.decide(FLAT, TICKET).to_dict()["fields"]
    second = engine.decide(FLAT, TICKET).to_dict()["fields"]
    assert first == second


def test_decide_many_equals_one_by_one(engine: Engine):
    texts = [TICKET, "Where is my parcel? It has been two weeks.", "I cannot log in to my account since this morning."]
    batched = engine.decide_many(FLAT, texts)
    assert {d.stats.batch_size for d in batched} == {3}
    for text, together in zip(texts, batched):
        alone = engine.decide(FLAT, text)
        assert together.value == alone.value
        for name, field in together.fields.items():
            for label, p in field.probabilities.items():
                assert p == pytest.approx(alone.fields[name].probabilities[label], abs=1e-4)


def test_complete_line_versus_naive_split(engine: Engine, tokenizer):
    """Splitting at the colon leaves a dangling space token; the complete line does not."""
    compiled, _ = engine.compile(FLAT)
    field = compiled.fields["refund"]
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TICKET)
    anchor = compiled.parts.tail
    anchor_ids = compiled.view.encode(anchor)
    naive_row = compiled.view.suffix_after(anchor_ids, anchor, compiled.layout.line("refund", "")[:-1])
    assert tokenizer.decode(naive_row[-1:]) == " "
    naive = engine.backend.forward_plain(prefix + naive_row).exp()
    bare = [tokenizer.convert_tokens_to_ids(t) for t in ("true", "false")]
    naive_mass = float(naive[bare].sum())
    complete = engine.backend.forward_plain(prefix + list(field.stem)).exp()
    complete_mass = float(complete[list(field.mass_tokens)].sum())
    print(f'naive {naive_mass:.2e} complete {complete_mass:.3f}')
    assert complete_mass > 0.3
    assert naive_mass < complete_mass / 20


def test_quoted_booleans_are_summed(engine: Engine, tokenizer):
    compiled, _ = engine.compile(FLAT)
    field = compiled.fields["refund"]
    quote = tokenizer.encode(' "', add_special_tokens=False)
    assert quote[0] in field.root.children, "the quoted spelling must be a branch of the trie"
    quoted = field.root.children[quote[0]]
    assert quoted.read and quoted.values == {0, 1}
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TICKET)
    at_root = engine.backend.forward_plain(prefix + list(field.stem))
    after_quote = engine.backend.forward_plain(prefix + list(field.stem) + quote[:1])
    reading = read_field(field, {field.root.position: at_root, quoted.position: after_quote})
    p = at_root.double().exp()
    q = after_quote.double().exp()
    t_bare, f_bare = (tokenizer.encode(s, add_special_tokens=False)[0] for s in (" true", " false"))
    t_q, f_q = (tokenizer.encode(s, add_special_tokens=False)[0] for s in ("true", "false"))
    true = p[t_bare] + p[quote[0]] * q[t_q]
    false = p[f_bare] + p[quote[0]] * q[f_q]
    assert reading.probabilities[0] == pytest.approx(float(true / (true + false)), rel=1e-6)
    bare_only = float(p[t_bare] / (p[t_bare] + p[f_bare]))
    assert reading.probabilities[0] != pytest.approx(bare_only, abs=1e-6)


def test_pinned_answer_is_in_the_context_of_later_rows(engine: Engine):
    compiled, _ = engine.compile(FLAT)
    pinned = engine.decide(FLAT, TICKET)
    unpinned = Engine(engine.loaded, options=EngineOptions(pin_first=False)).decide(FLAT, TICKET)
    topic = compiled.fields["topic"]
    line = list(topic.answer_lines[topic.values.index(pinned.value.topic if hasattr(pinned.value, "topic") else pinned.fields["topic"].value)])
    refund = compiled.fields["refund"]
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TICKET)
    by_hand = engine.backend.forward_plain(prefix + line + list(refund.stem)).exp()
    mass = float(by_hand[list(refund.mass_tokens)].sum())
    assert pinned.fields["refund"].candidate_mass == pytest.approx(mass, rel=1e-3)
    assert pinned.fields["refund"].candidate_mass != pytest.approx(unpinned.fields["refund"].candidate_mass, rel=1e-3)


def test_shared_prefix_labels_follow_the_branch(engine: Engine, tokenizer):
    compiled, _ = engine.compile(FLAT)
    channel = compiled.fields["channel"]
    assert channel.method == "branch" and len(channel.read_positions) > 1
    result = engine.decide(FLAT, TICKET)
    probabilities = result.fields["channel"].probabilities
    assert set(probabilities) == {"card_payment", "card_payment_fee", "card_delivery", "cash"}
    assert all(p > 0 for p in probabilities.values())
    urgency = compiled.fields["urgency"]
    # `1` starts 1, 10, 11 and 12: the row must go one digit further to tell them apart.
    assert urgency.method == "branch"


def test_exact_mode_scores_whole_lines(engine: Engine):
    exact = Engine(engine.loaded, options=EngineOptions(mode=ReadMode.EXACT))
    compiled, _ = exact.compile(FLAT)
    assert all(f.method == "exact" for f in compiled.fields.values())
    result = exact.decide(FLAT, TICKET)
    for field in result.fields.values():
        assert sum(field.probabilities.values()) == pytest.approx(1.0)
    assert result.stats.forward_passes == 2


def test_conversation_and_json_inputs(engine: Engine):
    conversation = [
        {"role": "user", "content": "Hi, my order arrived broken."},
        {"role": "assistant", "content": "Sorry to hear that. What would you like?"},
        {"role": "user", "content": "Please refund me."},
    ]
    assert engine.decide(FLAT, conversation).stats.forward_passes == 2
    assert engine.decide(FLAT, {"subject": "refund", "body": "charged twice"}).fields["topic"].asked


def test_empty_input_is_refused(engine: Engine):
    with pytest.raises(InputError, match="empty"):
        engine.decide(FLAT, "   \n ")


def test_input_longer_than_the_context_is_refused(engine: Engine):
    engine.decide(FLAT, TICKET)
    text = "word " * (engine.backend.max_positions + 10)
    with pytest.raises(InputError, match=str(engine.backend.max_positions)):
        engine.decide(FLAT, text)
    # Nothing already done is lost: the engine still answers afterwards.
    assert engine.decide(FLAT, TICKET).stats.prefix_cache_hit


def test_ids_answer_format(engine: Engine):
    rubric = Rubric.model_validate({**FLAT.model_dump(), "answer_format": "ids"})
    compiled, _ = engine.compile(rubric)
    assert "A) billing" in compiled.parts.prefix
    result = engine.decide(rubric, TICKET)
    assert result.fields["topic"].value in ("billing", "delivery", "account_access")
    assert set(result.fields["topic"].probabilities) == {"billing", "delivery", "account_access"}


def test_rubric_too_long_for_the_model_is_refused_before_any_pass(engine: Engine):
    wordy = "a long explanation of this option " * 700
    rubric = Rubric.model_validate({
        "name": "wordy",
        "fields": {"pick": {"kind": "choice", "question": "Pick one", "options": {"alpha": wordy, "beta": wordy}}},
    })
    with pytest.raises(InputError, match="before any input"):
        engine.decide(rubric, TICKET)


def test_calibration_rescales_without_changing_winners_and_abstains(engine: Engine):
    from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration

    raw = engine.decide(Triage, TICKET)
    hot = Calibration(rubric="triage", fields={
        "sentiment": FieldCalibration(temperature=3.0),
        "department": FieldCalibration(min_candidate_mass=1.0),  # no answer ever has all the mass
    })
    calibrated = engine.decide(Triage, TICKET, calibration=hot)
    before, after = raw.fields["sentiment"], calibrated.fields["sentiment"]
    assert after.value == before.value and not after.abstained
    assert max(after.probabilities.values()) < max(before.probabilities.values())
    assert sum(after.probabilities.values()) == pytest.approx(1.0)
    department = calibrated.fields["department"]
    assert department.abstained and department.value is None
    assert calibrated.abstained == ["department"] and calibrated.value.department is None
    # The rest of the object is still decided, after the department's best guess written in the prompt.
    assert calibrated.fields["refund_requested"].probabilities == raw.fields["refund_requested"].probabilities
