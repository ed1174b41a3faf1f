"""Generated YAML rubrics, valid and hostile: every valid one loads, round-trips and plans; every
defective one is refused with located one-line problems at the defect; nothing crashes.

Each defect is applied to a freshly generated valid rubric, so the corpus explores combinations no
hand-written list has (a bad label inside a conditional field of an `ids` rubric declared last-first...).
"""

from __future__ import annotations

import json
import string

import pytest
from hostile import (
    CORPUS,
    LINE_BREAKS_BUT_LF,
    LOOKALIKES,
    ZERO_WIDTH,
    Draft,
    as_json,
    check_refusal,
    drafts,
    located_at,
    names,
)
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from decisionflow.errors import RubricError
from decisionflow.spec.declare import model_for
from decisionflow.spec.plan import make_plan
from decisionflow.spec.rubric import DECLARATION, MAX_ANSWER_IDS, Rubric, find_cycle
from decisionflow.spec.yaml_reader import MAX_DEPTH, MAX_REPEATED_VALUES
from decisionflow.spec.yaml_rubric import dump_rubric, load_rubric, loads_rubric

SOURCE = "hostile.yaml"


def refused(text: str | bytes) -> list:
    with pytest.raises(RubricError) as caught:
        loads_rubric(text, source=SOURCE)
    return check_refusal(caught.value, SOURCE)


def choice_fields(draft: Draft) -> list[str]:
    return [name for name in draft.order if draft.field(name)["kind"] == "choice"]


def score_fields(draft: Draft) -> list[str]:
    return [name for name in draft.order if draft.field(name)["kind"] == "score"]


# --- valid rubrics -------------------------------------------------------------------------------


@CORPUS
@given(drafts())
def test_valid_rubrics_load_in_order_round_trip_and_plan(draft: Draft):
    rubric = loads_rubric(as_json(draft.data), source=SOURCE)
    assert list(rubric.fields) == draft.order
    for name in draft.order:
        options = draft.field(name).get("options")
        if options is not None:
            assert list(rubric.field(name).options) == list(options)
    assert loads_rubric(dump_rubric(rubric)) == rubric
    plan = make_plan(rubric)
    assert sorted(n for r in plan.rounds for n in r.fields) == sorted(draft.order)
    decided: set[str] = set()
    for round_ in plan.rounds:  # every field after the fields it depends on
        assert all(set(rubric.field(n).dependencies) <= decided for n in round_.fields)
        decided.update(round_.fields)
    typed = model_for(rubric)
    typed.model_validate({spec.name: spec.values[-1] for spec in rubric})


@CORPUS
@given(drafts(score_options=True), st.lists(st.sampled_from(LOOKALIKES), min_size=2, max_size=6, unique=True))
def test_dumped_rubrics_read_back_equal_whatever_their_labels_look_like(draft: Draft, lookalikes: list[str]):
    data = json.loads(json.dumps(draft.data))  # score option keys as written by a class: integers
    for name in score_fields(draft):
        if "options" in draft.field(name):
            data["fields"][name]["options"] = dict(draft.field(name)["options"])
    data["fields"]["lookalike"] = {"kind": "choice", "question": "q", "options": lookalikes}
    assume(len({label.casefold().strip("-_./ ") for label in lookalikes}) == len(lookalikes))
    try:
        rubric = Rubric.model_validate(data, context=DECLARATION)
    except ValueError:
        assume(False)  # two lookalikes may be identical after normalisation (`True`, `true`)
    assert loads_rubric(dump_rubric(rubric)) == rubric


@CORPUS
@given(drafts(), st.sampled_from(["utf-8-sig", "utf-16", "utf-32"]))
def test_files_with_a_byte_order_mark_load_in_any_unicode_encoding(tmp_path_factory, draft: Draft, encoding: str):
    path = tmp_path_factory.mktemp("enc") / "rubric.yaml"
    path.write_bytes(as_json(draft.data).encode(encoding))
    assert list(load_rubric(path).fields) == draft.order


def test_a_thousand_fields_chained_last_first_validate_and_plan():
    count = 1000
    lines = [f"  f{i}: {{kind: boolean, question: q, after: [f{i + 1}]}}" for i in range(count)]
    lines.append(f"  f{count}: {{kind: boolean, question: q}}")
    rubric = loads_rubric("name: chain\nfields:\n" + "\n".join(lines) + "\n")
    plan = make_plan(rubric)
    assert plan.forward_passes == count + 1
    assert plan.rounds[0].fields == (f"f{count}",) and plan.rounds[-1].fields == ("f0",)


def test_cycle_detection_does_not_recurse():
    chain = {f"n{i}": (f"n{i + 1}",) for i in range(100_000)}
    chain["n100000"] = ()
    assert find_cycle(chain) is None
    chain["n100000"] = ("n0",)
    cycle = find_cycle(chain)
    assert cycle is not None and cycle[0] == cycle[-1] and len(cycle) == 100_002


# --- defects in the data ------------------------------------------------------------------------


_REFUSED_IN_LABELS = st.one_of(
    st.sampled_from(list(LINE_BREAKS_BUT_LF + "\t\n\x00\x1b\x7f\ud800\udfff\ufffe\uffff\ufdd0\U0001fffe")),
    st.characters(categories=["Cc"]),
)


@CORPUS
@given(drafts(), st.data())
def test_labels_with_line_breaks_controls_or_surrogates_are_refused(draft: Draft, data: st.DataObject):
    fields = choice_fields(draft)
    assume(fields)
    name = data.draw(st.sampled_from(fields))
    options = draft.field(name)["options"]
    old = data.draw(st.sampled_from(list(options)))
    at = data.draw(st.integers(0, len(old)))
    bad = old[:at] + data.draw(_REFUSED_IN_LABELS) + old[at:]
    draft.field(name)["options"] = _replace_label(options, old, bad)
    problems = refused(as_json(draft.data))
    # A raw U+2028 or lone surrogate in the file is refused where it stands, before YAML reads it.
    assert located_at(problems, f"fields.{name}.options") or problems[0].location.startswith("line ")


@CORPUS
@given(drafts(), st.data())
def test_labels_and_questions_without_visible_text_are_refused(draft: Draft, data: st.DataObject):
    blank = data.draw(st.text(st.sampled_from(ZERO_WIDTH + " \u3000\u2800\u3164\ufe0f"), max_size=4))
    name = data.draw(st.sampled_from(draft.order))
    spec = draft.field(name)
    if spec["kind"] == "choice" and data.draw(st.booleans()):
        old = data.draw(st.sampled_from(list(spec["options"])))
        spec["options"] = _replace_label(spec["options"], old, blank)
        location = f"fields.{name}.options"
    else:
        spec["question"] = blank
        location = f"fields.{name}.question"
    assert located_at(refused(as_json(draft.data)), location)


def _replace_label(options, old, new):
    if isinstance(options, list):
        return [new if label == old else label for label in options]
    return {(new if label == old else label): text for label, text in options.items()}


_LOOSE_INTEGERS = st.one_of(
    st.integers(0, 9).map(str), st.integers(0, 9).map(float), st.booleans(), st.just("3 "),
    st.floats(allow_nan=True, allow_infinity=True),
)
_LOOSE_BOOLEANS = st.one_of(
    st.sampled_from(["true", "false", "yes", "no", "on", "1", "0", "True", ""]), st.integers(-1, 2),
    st.floats(0, 1), st.just(None),
)


@CORPUS
@given(drafts(), st.data())
def test_numbers_and_booleans_are_never_coerced(draft: Draft, data: st.DataObject):
    """The coercion policy: `"3"`, `3.0` and `true` are not integers; `"true"`, `1` and `yes` are not booleans."""
    target = data.draw(st.sampled_from(["min", "max", "pin_first", "max_fields_per_pass"]))
    if target in ("min", "max"):
        fields = score_fields(draft)
        assume(fields)
        name = data.draw(st.sampled_from(fields))
        draft.field(name)[target] = data.draw(st.one_of(_LOOSE_INTEGERS, st.just(None)))
        location = f"fields.{name}"
    elif target == "pin_first":
        draft.data[target] = data.draw(_LOOSE_BOOLEANS)
        location = target
    else:
        draft.data[target] = data.draw(st.one_of(_LOOSE_INTEGERS, st.integers(-3, 0)))
        location = target
    assert located_at(refused(as_json(draft.data)), location)


@CORPUS
@given(drafts(), st.data())
def test_condition_values_must_have_the_answers_type(draft: Draft, data: st.DataObject):
    name = data.draw(st.sampled_from(draft.topo[1:] or draft.topo))
    target = draft.topo[0]
    assume(name != target)
    kind = draft.field(target)["kind"]
    if kind == "boolean":
        wrong = data.draw(st.sampled_from(["true", "false", 1, 0, "yes"]))
    elif kind == "score":
        wrong = data.draw(st.one_of(st.integers(-60, 160).map(str), st.integers(0, 9).map(float), st.booleans()))
    else:
        wrong = data.draw(st.one_of(st.integers(), st.booleans(), st.just("not-a-label-" * 2)))
    draft.field(name)["when"] = {target: [wrong]}
    assert located_at(refused(as_json(draft.data)), f"fields.{name}.when")


@CORPUS
@given(drafts(), st.data())
def test_unknown_keys_are_refused_even_when_they_name_another_key(draft: Draft, data: st.DataObject):
    name = data.draw(st.sampled_from(draft.order))
    allowed = {"kind", "question", "options", "min", "max", "after", "when"}
    key = data.draw(st.one_of(st.sampled_from(["name", "instructions", "fields", "answer_format", "Kind", "question "]),
                              names.filter(lambda k: k not in allowed)))
    draft.field(name)[key] = data.draw(st.one_of(st.just(name), st.integers(), st.text(string.printable, max_size=5)))
    assert located_at(refused(as_json(draft.data)), f"fields.{name}.{key}")


@CORPUS
@given(drafts(), st.sampled_from(["_x", "__x", "_", "model_dump", "model_config", "model_fields", "model_validate", "Config"]))
def test_field_names_pydantic_cannot_use_are_refused(draft: Draft, reserved: str):
    old = draft.order[-1]
    for spec in draft.data["fields"].values():  # keep every reference pointing at the renamed field
        spec["after"] = [reserved if dep == old else dep for dep in spec.get("after", [])]
        if old in spec.get("when", {}):
            spec["when"] = {reserved: spec["when"][old]}
    draft.data["fields"] = {(reserved if k == old else k): v for k, v in draft.data["fields"].items()}
    assert located_at(refused(as_json(draft.data)), f"fields.{reserved}")


@settings(CORPUS, max_examples=15)
@given(drafts(), st.integers(MAX_ANSWER_IDS - 2, MAX_ANSWER_IDS + 40))
def test_ids_format_needs_an_id_for_every_option(draft: Draft, count: int):
    draft.data["answer_format"] = "ids"
    name = draft.order[0]
    draft.data["fields"][name] = {"kind": "choice", "question": "q", "options": [f"option {i}" for i in range(count)]}
    for spec in draft.data["fields"].values():
        spec.pop("when", None)  # the replaced field's answers changed
    if count <= MAX_ANSWER_IDS:
        assert len(loads_rubric(as_json(draft.data)).field(name).options) == count
    else:
        assert located_at(refused(as_json(draft.data)), f"fields.{name}.options")


@CORPUS
@given(drafts(max_fields=6), st.data())
def test_dependency_cycles_are_refused_naming_the_cycle(draft: Draft, data: st.DataObject):
    assume(len(draft.topo) >= 2)
    first = data.draw(st.integers(0, len(draft.topo) - 2))
    last = data.draw(st.integers(first + 1, len(draft.topo) - 1))
    early, late = draft.topo[first], draft.topo[last]
    chain = draft.topo[first + 1 : last + 1]
    for before, after in zip([early, *chain], chain):  # early -> ... -> late, then late -> early
        draft.field(after).setdefault("after", [])
        if before not in draft.field(after)["after"]:
            draft.field(after)["after"].append(before)
    draft.field(early)["after"] = [*draft.field(early).get("after", []), late]
    problems = refused(as_json(draft.data))
    assert any("dependency cycle" in p.message for p in problems)


@CORPUS
@given(st.data())
def test_option_keys_that_read_as_the_same_number_are_one_key_twice(data: st.DataObject):
    spellings = {1: ["1", "01", "0x1", "0o1", "+1", "001"], 2: ["2", "02", "0x2", "0o2", "+2"]}
    level = data.draw(st.sampled_from([1, 2]))
    first, second = data.draw(st.lists(st.sampled_from(spellings[level]), min_size=2, max_size=2, unique=True))
    text = f"name: t\nfields:\n  s:\n    kind: score\n    question: q\n    min: 0\n    max: 3\n    options:\n      {first}: a\n      {second}: b\n"
    problems = refused(text)
    assert any(p.location == f"fields.s.options.{second}" and "duplicate key" in p.message and p.line == 10 for p in problems)


def test_quoted_score_levels_are_strings_not_levels():
    problems = refused("name: t\nfields:\n  s: {kind: score, question: q, min: 0, max: 3, options: {'1': one}}\n")
    assert located_at(problems, "fields.s.options")


# --- defects in the text -------------------------------------------------------------------------

_REFUSED_IN_FILES = st.one_of(
    st.sampled_from(list("\x00\x01\x08\x0b\x0c\x0e\x1f\x7f\x80\x85\x9f\ud800\udbff\udc00\udfff\ufffe\uffff\u2028\u2029")),
    st.characters(min_codepoint=0, max_codepoint=0x1F).filter(lambda c: c not in "\t\n\r"),
    st.characters(min_codepoint=0x7F, max_codepoint=0x9F),
    st.characters(categories=["Cs"]),
)


@CORPUS
@given(drafts(), st.data())
def test_refused_characters_anywhere_in_a_file_are_named_by_line_and_column(draft: Draft, data: st.DataObject):
    text = dump_rubric(loads_rubric(as_json(draft.data))) if data.draw(st.booleans()) else as_json(draft.data)
    at = data.draw(st.integers(0, len(text)))
    text = text[:at] + data.draw(_REFUSED_IN_FILES) + text[at:]
    (problem,) = refused(text)
    line = text.count("\n", 0, at) + 1
    column = at - (text.rfind("\n", 0, at) + 1) + 1
    assert problem.location == f"line {line}, column {column}" and problem.line == line


@CORPUS
@given(drafts(), st.sampled_from(["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]))
def test_utf16_and_utf32_without_a_byte_order_mark_are_refused_clearly(draft: Draft, encoding: str):
    (problem,) = refused(as_json(draft.data).encode(encoding))
    assert "UTF-16 or UTF-32" in problem.message and problem.location.startswith("line 1, column ")


@CORPUS
@given(st.binary(min_size=1, max_size=200))
def test_bytes_that_are_not_utf8_are_refused_with_their_line(data: bytes):
    try:
        data.decode("utf-8")
        assume(False)
    except UnicodeDecodeError:
        pass
    problems = refused(b"name: t\n" + data)
    assert problems[0].location.startswith("line ")


@CORPUS
@given(drafts(), st.integers(MAX_DEPTH + 1, 3000), st.sampled_from(["[", "{a: "]), st.data())
def test_deep_nesting_is_refused_not_a_recursion_error(draft: Draft, depth: int, opener: str, data: st.DataObject):
    closer = "]" if opener == "[" else "}"
    draft.field(data.draw(st.sampled_from(draft.order)))["deep"] = "@@DEEP@@"
    text = as_json(draft.data).replace('"@@DEEP@@"', opener * depth + "1" + closer * depth, 1)
    (problem,) = refused(text)
    assert f"nested more than {MAX_DEPTH} levels" in problem.message and problem.location.startswith("line 1, ")


@CORPUS
@given(drafts(), st.integers(2, 12), st.integers(3, 9), st.booleans())
def test_alias_bombs_stop_at_the_bound(draft: Draft, width: int, levels: int, duplicate_inside: bool):
    """Nested aliases multiply ("billion laughs"); reading stops once they repeat the bound's worth of values."""
    assume(width**levels > MAX_REPEATED_VALUES)
    lines = ['{"l0": &l0 [' + ", ".join(['"lol"'] * width) + ("], " if not duplicate_inside else '], "d": {"k": 1, "k": 2}, ')]
    lines += [f'"l{i}": &l{i} [' + ", ".join([f"*l{i - 1}"] * width) + "], " for i in range(1, levels)]
    text = "".join(lines) + as_json(draft.data)[1:]
    problems = refused(text)
    assert any("aliases repeat more than" in p.message for p in problems) or (
        duplicate_inside and any("duplicate key" in p.message for p in problems) and len(problems) == 1
    )


@pytest.mark.parametrize(
    "text",
    [
        "name: &a [*a]\nfields: {a: {kind: boolean, question: q}}\n",
        "name: t\nfields: &f {a: {kind: boolean, question: q}, b: *f}\n",
        "name: t\nfields:\n  a: &x {kind: boolean, question: q, more: [*x]}\n",
    ],
)
def test_recursive_aliases_are_refused(text):
    (problem,) = refused(text)
    assert "recursive structure" in problem.message and problem.location.startswith("line ")


def test_shared_option_lists_through_aliases_still_work():
    rubric = loads_rubric(
        "name: t\nfields:\n  a: {kind: choice, question: q, options: &teams [billing, returns]}\n"
        "  b: {kind: choice, question: q, options: *teams}\n  c: {<<: {kind: boolean}, question: q}\n"
    )
    assert rubric.field("b").options == rubric.field("a").options and rubric.field("c").kind.value == "boolean"


@pytest.mark.parametrize(
    "value",
    ["!!int x", "!!int 1_000", "!!float x", "!!bool yes", "!!null x", "!!timestamp x", "!!timestamp 2024-01-01",
     "!!binary aGk=", "!!set {a}", "!!omap [a: 1]", "!!python/object:os.system x", "!custom x",
     "!!str [a]", "!!map [a]", "!!int 1" + "0" * 5000],
)
def test_explicit_tags_outside_the_core_schema_are_located(value):
    (problem,) = refused(f"name: t\nfields:\n  a: {{kind: score, question: q, min: {value}, max: 3}}\n")
    assert problem.location.startswith("line 3, column ")


# --- no crash, whatever the text ----------------------------------------------------------------


@CORPUS
@given(drafts(), st.data())
def test_any_cut_or_spliced_rubric_gives_a_rubric_or_located_problems(draft: Draft, data: st.DataObject):
    text = dump_rubric(loads_rubric(as_json(draft.data)))
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    insert = data.draw(st.text(st.sampled_from(string.printable + "&*!|>-?:{}[]#%@`'\"\u00a0\ufeff"), max_size=12))
    mutated = text[:start] + insert + text[end:]
    try:
        loads_rubric(mutated, source=SOURCE)
    except RubricError as error:
        check_refusal(error, SOURCE)


@CORPUS
@given(st.one_of(st.text(max_size=300), st.binary(max_size=300)))
def test_arbitrary_text_and_bytes_never_crash(blob):
    try:
        loads_rubric(blob, source=SOURCE)
    except RubricError as error:
        check_refusal(error, SOURCE)


def test_many_unknown_keys_are_each_reported_once_with_their_line():
    count = 5000
    text = "name: t\n" + "".join(f"k{i}: 1\n" for i in range(count)) + "fields:\n  a: {kind: boolean, question: q}\n"
    problems = refused(text)
    assert len(problems) == count
    assert [p.line for p in problems] == list(range(2, count + 2))


# --- accepted means decidable ---------------------------------------------------------------------


@pytest.mark.model
@settings(CORPUS, max_examples=8)
@given(drafts(max_fields=4))
def test_every_accepted_rubric_compiles_for_the_real_tokenizer(tokenizer, draft: Draft):
    """What validation accepts must not fail later: the prompt renders, every label tokenises into
    its trie, and a request's tokens follow the cached prefix."""
    from decisionflow.compiler import compile_rubric

    rubric = loads_rubric(as_json(draft.data))
    compiled = compile_rubric(tokenizer, rubric)
    assert set(compiled.fields) == set(rubric.fields)
    assert compiled.request_tokens("Subject: charged twice, please refund")

