"""Marginalised dependencies, options that depend on a parent's answer, and derived fields, on the real model.

Each hypothesis branch is checked against the model's own forward over exactly the text it stands
for (the parent's line replaced by the alternative, the later lines re-written after it).
The raw readout (`debias="none"`) keeps those distributions comparable with the hand-made ones.
"""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from decisionflow.runtime.engine import Engine
from decisionflow.runtime.readout.readout import read_field
from decisionflow.spec import ask, decision, derive, make_plan, rubric_of
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

pytestmark = pytest.mark.model

TEXT = "My suitcase never arrived after my flight to Rome, and I was charged a fee twice."

HIERARCHY = """
name: hierarchy
instructions: Route one customer message.
fields:
  domain: {kind: choice, question: The area it concerns, options: [banking, travel, shopping]}
  intent:
    kind: choice
    question: What the customer wants
    marginalize: 2
    options_by:
      domain:
        banking: [card_fee, transfer, balance]
        travel: [lost_luggage, book_flight]
        shopping: [order_status, return_item]
"""


def reading_by_hand(engine: Engine, prefix: list[int], row) -> tuple[float, ...]:
    """A row's distribution from the model's plain forward, one call per read position."""
    by_position = {}
    for local in row.read_positions:
        path, position = [], local
        while position >= 0:
            path.append(row.row_tokens[position])
            position = row.row_parents[position]
        by_position[local] = engine.backend.forward_plain(prefix + path[::-1])
    return read_field(row, by_position).probabilities


def line_of(compiled, name: str, label: str) -> list[int]:
    cf = compiled.fields[name]
    return list(cf.answer_lines[cf.labels.index(label)])


def test_marginalised_branches_read_what_the_model_reads(engine: Engine):
    rubric = loads_rubric(HIERARCHY)
    compiled, plan = engine.compile(rubric)
    result = engine.decide(rubric, TEXT, debias="none")
    assert result.stats.forward_passes == len(plan.rounds) == 2
    intent = result.fields["intent"]
    domain = result.fields["domain"]
    top = sorted(domain.probabilities, key=lambda label: -domain.probabilities[label])[:2]
    weights = {label: domain.probabilities[label] / sum(domain.probabilities[t] for t in top) for label in top}
    assert intent.method == "marginalized" and intent.asked_probability == pytest.approx(1.0)
    request = compiled.request_tokens(TEXT)
    prefix = list(compiled.prefix_tokens) + request
    joint = {(j["parent"], j["label"]): j["probability"] for j in intent.joint}  # every pair: at most 5 here
    mixture: dict[str, float] = {}
    for hypothesis in top:
        row = compiled.row_for("intent", hypothesis)
        by_hand = reading_by_hand(engine, prefix + line_of(compiled, "domain", hypothesis), row)
        for label, p in zip(row.labels, by_hand):
            assert joint[(hypothesis, label)] == pytest.approx(weights[hypothesis] * p, rel=2e-3, abs=1e-6)
            mixture[label] = mixture.get(label, 0.0) + weights[hypothesis] * p
    assert set(intent.probabilities) == set(mixture)
    for label, p in mixture.items():
        assert intent.probabilities[label] == pytest.approx(p, rel=2e-3, abs=1e-6)
    assert intent.value == max(mixture, key=mixture.get)


def test_a_branch_replaces_a_parent_line_already_in_the_context(engine: Engine):
    rubric = loads_rubric("""
name: split
max_fields_per_pass: 1
fields:
  topic: {kind: choice, question: What the message is about, options: [luggage, payment]}
  angry: {kind: boolean, question: Whether the writer is angry}
  refund: {kind: boolean, question: Whether a refund is asked, after: [topic], marginalize: 2}
""")
    compiled, plan = engine.compile(rubric)
    assert [r.fields for r in plan.rounds] == [("topic",), ("angry",), ("refund",)]
    result = engine.decide(rubric, TEXT, debias="none")
    topic, angry, refund = (result.fields[n] for n in ("topic", "angry", "refund"))
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TEXT)
    written_angry = line_of(compiled, "angry", "true" if angry.value else "false")
    weights = {label: p for label, p in topic.probabilities.items()}
    mixture = {"true": 0.0, "false": 0.0}
    for hypothesis, weight in weights.items():
        by_hand = reading_by_hand(engine, prefix + line_of(compiled, "topic", hypothesis) + written_angry,
                                  compiled.fields["refund"])
        for label, p in zip(("true", "false"), by_hand):
            mixture[label] += weight * p
    for label, p in mixture.items():
        assert refund.probabilities[label] == pytest.approx(p, rel=2e-3)


def test_options_by_reads_only_the_parents_options(engine: Engine):
    rubric = loads_rubric(HIERARCHY.replace("    marginalize: 2\n", ""))
    compiled, _ = engine.compile(rubric)
    result = engine.decide(rubric, TEXT, debias="none")
    domain = result.fields["domain"].value
    intent = result.fields["intent"]
    assert set(intent.probabilities) == set(rubric.fields["intent"].options_by.options[domain])
    assert sum(intent.probabilities.values()) == pytest.approx(1.0)
    prefix = list(compiled.prefix_tokens) + compiled.request_tokens(TEXT) + line_of(compiled, "domain", domain)
    by_hand = reading_by_hand(engine, prefix, compiled.row_for("intent", domain))
    assert tuple(intent.probabilities.values()) == pytest.approx(by_hand, rel=2e-3)
    assert "travel: \"lost_luggage\" | \"book_flight\"" in compiled.parts.prefix


@decision(instructions="Triage one customer message.")
class Escalation(BaseModel):
    severity: Annotated[int, ask("How severe the problem is"), Field(ge=0, le=9)]
    legal_threat: Annotated[bool, ask("Whether the writer threatens legal action")]
    needs_human: Annotated[bool, derive(lambda severity, legal_threat: severity >= 7 or legal_threat)]
    callback: Annotated[bool | None, ask("Whether to call the customer back", when={"needs_human": True})] = None


def test_a_derived_field_takes_no_pass_and_its_probability_comes_from_its_inputs(engine: Engine):
    rubric = rubric_of(Escalation)
    plan = make_plan(rubric)
    assert plan.derived == ("needs_human",)
    assert all("needs_human" not in r.fields for r in plan.rounds)
    compiled, _ = engine.compile(rubric)
    assert '"needs_human"' not in compiled.parts.prefix
    result = engine.decide(Escalation, TEXT, debias="none")
    severity, legal, needs = (result.fields[n] for n in ("severity", "legal_threat", "needs_human"))
    assert needs.method == "derived" and needs.derived_from == "independent" and needs.candidate_mass is None
    assert result.value.needs_human == (result.value.severity >= 7 or result.value.legal_threat)
    low = sum(p for label, p in severity.probabilities.items() if int(label) < 7)
    assert needs.probabilities["false"] == pytest.approx(low * legal.probabilities["false"], rel=1e-9)
    assert result.fields["callback"].asked == result.value.needs_human
    assert result.stats.forward_passes == len(plan.rounds)
    assert needs.debias == "none"
    # Computed from corrected inputs, it reports their correction.
    corrected = engine.decide(Escalation, TEXT, debias="content_free")
    assert corrected.fields["severity"].debias == "content_free"
    assert corrected.fields["needs_human"].debias == "content_free"


def test_a_rule_table_derived_field_from_yaml(engine: Engine):
    rubric = loads_rubric("""
name: rules
fields:
  severity: {kind: score, question: How severe the problem is, min: 0, max: 9}
  channel: {kind: choice, question: Where to route it, options: [email, phone, legal]}
  queue:
    kind: choice
    question: The queue it lands in
    options: [urgent, normal]
    derive:
      rules:
        - if: {any: [{field: severity, at_least: 8}, {field: channel, is: legal}]}
          then: urgent
      otherwise: normal
""")
    assert loads_rubric(dump_rubric(rubric)) == rubric
    result = engine.decide(rubric, TEXT, debias="none")
    severity, channel, queue = (result.fields[n] for n in ("severity", "channel", "queue"))
    expected_normal = sum(p for level, p in severity.probabilities.items() if int(level) < 8) * (1 - channel.probabilities["legal"])
    assert queue.probabilities["normal"] == pytest.approx(expected_normal, rel=1e-9)
    assert queue.value == ("urgent" if severity.value >= 8 or channel.value == "legal" else "normal")


def test_a_derived_field_over_a_marginalised_pair_uses_their_joint(engine: Engine):
    rubric = loads_rubric(HIERARCHY + """  luggage_case:
    kind: boolean
    question: Whether it is a luggage case in travel
    derive:
      rules:
        - if: {all: [{field: domain, is: travel}, {field: intent, is: lost_luggage}]}
          then: true
      otherwise: false
""")
    result = engine.decide(rubric, TEXT, debias="none")
    case = result.fields["luggage_case"]
    assert case.derived_from == "joint"
    joint = {(j["parent"], j["label"]): j["probability"] for j in result.fields["intent"].joint}
    assert case.probabilities["true"] == pytest.approx(joint.get(("travel", "lost_luggage"), 0.0), rel=1e-9)
