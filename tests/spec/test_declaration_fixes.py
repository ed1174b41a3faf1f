"""Regressions: markers conflated by typing's cache, `options_by` descriptions and item forms, Enum
returns of derived fields, score option keys, set-valued `when`, and located errors for bad arguments."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import textwrap
from typing import Annotated, Literal, Optional

import pytest
from pydantic import BaseModel, Field

from decisionflow import ask, decision, derive
from decisionflow.spec.declare import rubric_of
from decisionflow.spec.problems import RubricError
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

Intent = Literal["card_fee", "transfer", "lost_luggage", "book_flight"]
BASE = "name: r\nfields:\n  domain: {kind: choice, question: q, options: [banking, travel]}\n"


def _declare(**annotations):
    namespace = {"__annotations__": {}, "__module__": __name__}
    for name, value in annotations.items():
        if isinstance(value, tuple):
            namespace["__annotations__"][name], namespace[name] = value
        else:
            namespace["__annotations__"][name] = value
    return decision(type("C", (BaseModel,), namespace))


def _routed(intent_ask, intent_type=Intent):
    return _declare(domain=Annotated[Literal["banking", "travel"], ask("d")], intent=Annotated[intent_type, intent_ask])


# 1. typing caches Annotated[...] by its metadata: ask(when=1) must not be ask(when=True)


def _flag_class(value):
    @decision
    class C(BaseModel):
        g: Annotated[bool, ask("flag?")]
        f: Annotated[Optional[bool], ask("q", when={"g": value})] = None

    return C


@pytest.mark.parametrize("order", [(1, True), (True, 1)])
def test_when_true_and_1_are_not_conflated(order):
    for value in order:
        if value is True:
            assert rubric_of(_flag_class(value)).fields["f"].when.values == (True,)
        else:
            with pytest.raises(RubricError, match="1 is not an allowed answer"):
                _flag_class(value)


def test_ask_equality_is_type_strict():
    assert ask("q", when={"g": 1}) != ask("q", when={"g": True})
    assert ask("q", when={"g": True}) == ask("q", when={"g": [True]})
    assert ask("q", options={1: "x"}) != ask("q", options={True: "x"})


# 2./3. options_by descriptions survive the dump and are kept from Python


def test_options_by_descriptions_from_options_round_trip():
    rubric = rubric_of(_routed(ask("q", options={"card_fee": "fees on the card"}, options_by={"domain": {
        "banking": ["card_fee", "transfer"], "travel": ["lost_luggage", "book_flight"]}})))
    again = loads_rubric(dump_rubric(rubric))
    assert again == rubric and again.key == rubric.key
    assert again.fields["intent"].options["card_fee"] == "fees on the card"


def test_python_options_by_mapping_keeps_descriptions():
    rubric = rubric_of(_routed(ask("q", options_by={"domain": {
        "banking": {"card_fee": "fees on card", "transfer": "move money"},
        "travel": ["lost_luggage", "book_flight"]}})))
    spec = rubric.fields["intent"]
    assert spec.options_by.options["banking"] == {"card_fee": "fees on card", "transfer": "move money"}
    assert spec.options["transfer"] == "move money"
    again = loads_rubric(dump_rubric(rubric))
    assert again == rubric and again.key == rubric.key


@pytest.mark.parametrize("per_answer", [
    "{banking: {card_fee: fees, transfer: }, travel: [lost_luggage, book_flight]}",
    "{banking: [{card_fee: fees}, transfer], travel: [lost_luggage, book_flight]}",
    "{banking: [{label: card_fee, description: fees}, transfer], travel: [lost_luggage, book_flight]}",
])
def test_yaml_options_by_descriptions_round_trip(per_answer):
    rubric = loads_rubric(BASE + f"  f:\n    kind: choice\n    question: q\n    options_by: {{domain: {per_answer}}}\n")
    assert rubric.fields["f"].options_by.options["banking"] == {"card_fee": "fees", "transfer": ""}
    assert rubric.fields["f"].options["card_fee"] == "fees"
    again = loads_rubric(dump_rubric(rubric))
    assert again == rubric and again.key == rubric.key


def test_yaml_options_with_descriptions_and_options_by_round_trip():
    rubric = loads_rubric(BASE + "  f:\n    kind: choice\n    question: q\n"
                          "    options: {a: first, b: , c: , d: }\n"
                          "    options_by: {domain: {banking: [a, b], travel: [c, d]}}\n")
    again = loads_rubric(dump_rubric(rubric))
    assert again == rubric and again.key == rubric.key


# 4./5. options_by items: other forms refused with a location, repeated labels refused


@pytest.mark.parametrize("items, location, message", [
    ("[[a], b]", "fields.f.options_by.domain.banking.0", "option 0 must be a label"),
    ("[{a: x, b: y}, c]", "fields.f.options_by.domain.banking.0", "got a mapping with keys"),
    ("[a, a, b]", "fields.f.options_by.domain.banking.1", "duplicate option 'a'"),
    ("[a, a]", "fields.f.options_by.domain.banking.1", "duplicate option 'a'"),
    ("[c, {d: one}, {d: two}]", "fields.f.options_by.domain.banking.2", "duplicate option 'd'"),
    ("[1, b]", "fields.f.options_by.domain.banking.0", "must be a string label (quote it)"),
])
def test_yaml_options_by_bad_items_are_located(items, location, message):
    text = BASE + f"  f:\n    kind: choice\n    question: q\n    options_by: {{domain: {{banking: {items}, travel: [x, y]}}}}\n"
    with pytest.raises(RubricError) as caught:
        loads_rubric(text)
    assert any(p.location == location and message in p.message for p in caught.value.problems), str(caught.value)


def test_python_options_by_repeated_label_is_refused():
    with pytest.raises(RubricError, match=r"fields\.intent\.options_by\.domain\.banking\.1: duplicate option 'card_fee'"):
        _routed(ask("q", options_by={"domain": {"banking": ["card_fee", "card_fee", "transfer"],
                                                "travel": ["lost_luggage", "book_flight"]}}))


# 6. a derive function may return members of the field's own Enum


class Queue(str, enum.Enum):
    URGENT = "urgent"
    NORMAL = "normal"


class PlainQueue(enum.Enum):
    URGENT = "urgent"
    NORMAL = "normal"


@pytest.mark.parametrize("kind", [Queue, PlainQueue])
def test_derive_may_return_enum_members(kind):
    cls = _declare(severity=Annotated[int, ask("q"), Field(ge=0, le=9)],
                   queue=Annotated[kind, derive(lambda severity: kind.URGENT if severity >= 7 else kind.NORMAL)])
    rule = rubric_of(cls).fields["queue"].derive
    assert rule.evaluate({"severity": 8}) == "urgent" and type(rule.evaluate({"severity": 1})) is str


def test_derive_returning_another_enums_member_is_refused():
    with pytest.raises(RubricError, match="not an allowed answer"):
        _declare(severity=Annotated[int, ask("q"), Field(ge=0, le=9)],
                 queue=Annotated[PlainQueue, derive(lambda severity: Queue.URGENT)])


# 7. a score's option keys are integers in every form


@pytest.mark.parametrize("options", ["[0, 1]", "[{0: none}]", "[{label: 0, description: none}]", "{0: none}"])
def test_score_options_take_integer_levels_in_every_form(options):
    rubric = loads_rubric(f"name: r\nfields:\n  s: {{kind: score, question: q, min: 0, max: 2, options: {options}}}\n")
    assert "0" in rubric.fields["s"].options
    assert loads_rubric(dump_rubric(rubric)) == rubric


@pytest.mark.parametrize("options", ["['0', '1']", "[{'0': none}]", "[{label: '1', description: one}]", "{'0': none}"])
def test_score_options_refuse_quoted_levels_in_every_form(options):
    with pytest.raises(RubricError, match=r"written as integers; got '\d' \(write \d, without quotes\)"):
        loads_rubric(f"name: r\nfields:\n  s: {{kind: score, question: q, min: 0, max: 2, options: {options}}}\n")


# 8. a set in `when` gives the same rubric in every process


def test_when_set_order_does_not_depend_on_hash_seed(tmp_path):
    module = tmp_path / "setwhen_mod.py"
    module.write_text(textwrap.dedent("""
        from typing import Annotated, Literal, Optional
        from pydantic import BaseModel
        from decisionflow import ask, decision
        from decisionflow.spec.declare import rubric_of
        @decision
        class S(BaseModel):
            d: Annotated[Literal["billing", "shipping", "returns", "other"], ask("Which team")]
            e: Annotated[Optional[bool], ask("Escalate", when={"d": {"billing", "returns", "other"}})] = None
        print(rubric_of(S).key)
    """))
    keys = set()
    for seed in ("1", "2", "3", "4"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        keys.add(subprocess.run([sys.executable, str(module)], env=env, capture_output=True, text=True,
                                check=True).stdout)
    assert len(keys) == 1


# 9./10. bad Python arguments: located, readable errors


@pytest.mark.parametrize("kwargs, message", [
    ({"options_by": {"domain": {"banking": "ab", "travel": "cd"}}}, "the options under 'banking' must be a list"),
    ({"options_by": {"domain": ["card_fee", "transfer"]}}, "must map each answer of 'domain'"),
    ({"after": 5}, r"ask\(after=\.\.\.\) takes a field name or a list"),
])
def test_bad_ask_arguments_are_located(kwargs, message):
    with pytest.raises(RubricError, match=r"fields\.intent: .*" + message):
        _routed(ask("q", **kwargs))


def test_derive_without_parameters_is_explained():
    with pytest.raises(RubricError) as caught:
        _declare(s=Annotated[bool, ask("q")], out=Annotated[bool, derive(lambda: True)])
    text = str(caught.value)
    assert "fields.out" in text and "takes no parameters" in text and "validation error" not in text


# 11. smaller ones


def test_private_decision_field_is_refused():
    with pytest.raises(RubricError, match=r"fields\._x: '_x' cannot be a decision field"):
        _declare(a=Annotated[bool, ask("a")], _x=Annotated[bool, ask("q")])


def test_when_long_form_takes_a_single_value():
    rubric = loads_rubric(BASE + "  e: {kind: boolean, question: q, when: {field: domain, values: banking}}\n")
    assert rubric.fields["e"].when.values == ("banking",)


def test_when_long_form_without_values_says_so():
    with pytest.raises(RubricError, match="give both `field` and `values`"):
        loads_rubric(BASE + "  e: {kind: boolean, question: q, when: {field: domain}}\n")


def test_non_ascii_name_says_ascii():
    with pytest.raises(RubricError, match="ASCII letters"):
        loads_rubric("name: r\nfields:\n  größe: {kind: boolean, question: q}\n")
