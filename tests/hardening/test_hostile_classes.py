"""Generated decorated classes, valid and hostile, and modules that misbehave while imported.

Valid classes must declare the rubric their types say, and every answer the engine can give must
validate into the user's own class (no refusal waiting at decision time). Each defect must be
refused when the class is decorated, naming the class (or the file it came from) and the field.
"""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import annotated_types
import pytest
from hostile import (
    CORPUS,
    LINE_BREAKS_BUT_LF,
    ZERO_WIDTH,
    check_refusal,
    labels,
    located_at,
    names,
    questions,
)
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, create_model
from typer.testing import CliRunner

from decisionflow.cli import app
from decisionflow.errors import RubricError
from decisionflow.spec.declare import ask, decision, rubric_of, typed_model
from decisionflow.spec.references import resolve_rubric
from decisionflow.spec.rubric import MAX_ANSWER_IDS, FieldKind, normalise_label

SOURCE_PREFIX = f"{__name__}.Generated"


# --- generating classes --------------------------------------------------------------------------


@st.composite
def field_specs(draw: Any, earlier: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One field: its kind, allowed answers, annotation pieces and `ask` arguments."""
    kind = draw(st.sampled_from(["literal", "enum", "bool", "int"]))
    spec: dict[str, Any] = {"kind": kind, "question": draw(questions), "metadata": []}
    if kind in ("literal", "enum"):
        spec["labels"] = draw(st.lists(labels, min_size=2, max_size=5, unique_by=normalise_label))
        if kind == "literal":
            spec["type"] = Literal[tuple(spec["labels"])]  # type: ignore[misc]
        else:
            spec["type"] = Enum("Choices", {f"M{i}": label for i, label in enumerate(spec["labels"])}, type=str)
        spec["answers"] = list(spec["labels"])
    elif kind == "bool":
        spec["type"], spec["answers"] = bool, [True, False]
    else:
        low = draw(st.integers(-20, 20))
        high = low + draw(st.integers(1, 30))
        style = draw(st.sampled_from(["field", "gt_lt", "interval", "annotated"]))
        spec["metadata"] = {
            "field": [Field(ge=low, le=high)],
            "gt_lt": [Field(gt=low - 1, lt=high + 1)],
            "interval": [annotated_types.Interval(ge=low, le=high)],
            "annotated": [annotated_types.Ge(low), annotated_types.Le(high)],
        }[style]
        spec["type"], spec["answers"], spec["low"], spec["high"] = int, list(range(low, high + 1)), low, high
    described = draw(st.lists(st.sampled_from(spec["answers"]), max_size=2, unique=True)) if kind != "bool" else []
    spec["options"] = {_option_key(spec, value): draw(questions) for value in described}
    if earlier and draw(st.booleans()):
        spec["after"] = [draw(st.sampled_from([name for name, _ in earlier]))]
    if earlier and draw(st.booleans()):
        target, target_spec = draw(st.sampled_from(earlier))
        spec["when"] = {target: draw(st.sampled_from(target_spec["answers"]))}
    return spec


def _option_key(spec: dict[str, Any], value: Any) -> Any:
    if spec["kind"] == "enum":
        return spec["type"](value)
    return value


@st.composite
def class_specs(draw: Any) -> list[tuple[str, dict[str, Any]]]:
    count = draw(st.integers(1, 5))
    fields: list[tuple[str, dict[str, Any]]] = []
    for name in draw(st.lists(names, min_size=count, max_size=count, unique=True)):
        fields.append((name, draw(field_specs(fields))))
    return fields


def build(fields: list[tuple[str, dict[str, Any]]], *, config: ConfigDict | None = None, **decision_args: Any) -> type[BaseModel]:
    definitions: dict[str, Any] = {}
    for name, spec in fields:
        marker = ask(spec["question"], options=spec["options"] or None, after=spec.get("after", ()), when=spec.get("when"))
        annotation = spec["type"] if "when" not in spec else Optional[spec["type"]]
        typed = Annotated[(annotation, marker, *spec["metadata"])]  # type: ignore[valid-type]
        definitions[name] = (typed, None) if "when" in spec else (typed, ...)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic warns about names shadowing BaseModel attributes
        model = create_model("Generated", __config__=config, __module__=__name__, **definitions)
    return decision(**decision_args)(model)


def refused(fields: list[tuple[str, dict[str, Any]]], **kwargs: Any) -> list:
    with pytest.raises(RubricError) as caught:
        build(fields, **kwargs)
    return check_refusal(caught.value, SOURCE_PREFIX)


# --- valid classes -------------------------------------------------------------------------------


@CORPUS
@given(class_specs())
def test_valid_classes_declare_their_types_and_accept_every_answer(fields):
    cls = build(fields)
    rubric = rubric_of(cls)
    assert list(rubric.fields) == [name for name, _ in fields]
    first = {name: (None if "when" in spec else spec["answers"][0]) for name, spec in fields}
    for name, spec in fields:
        field = rubric.field(name)
        if spec["kind"] == "literal":  # typing caches Literal[...] by its set of values: order is Python's
            assert sorted(field.values) == sorted(spec["answers"])
        else:
            assert list(field.values) == spec["answers"]
        assert field.kind is {"literal": FieldKind.CHOICE, "enum": FieldKind.CHOICE, "bool": FieldKind.BOOLEAN,
                              "int": FieldKind.SCORE}[spec["kind"]]
        for answer in spec["answers"]:  # what the engine hands the class, field by field
            typed_model(cls).model_validate({**first, name: answer})


@CORPUS
@given(class_specs(), st.data())
def test_constraints_are_kept_when_every_answer_passes_them_and_refused_otherwise(fields, data):
    """`multiple_of`, lengths, patterns and `strict` either hold for every allowed answer (then they
    are honoured) or the class is refused; never a class whose own constraints refuse an answer."""
    name, spec = data.draw(st.sampled_from(fields))
    assume("when" not in spec)
    if spec["kind"] == "int":
        step = data.draw(st.integers(1, 4))
        spec["metadata"] = [*spec["metadata"], Field(multiple_of=step)]
        honoured = all(answer % step == 0 for answer in spec["answers"])
    elif spec["kind"] == "literal":
        lengths = [len(label) for label in spec["labels"]]
        limit = data.draw(st.integers(0, 20))
        choice = data.draw(st.sampled_from(["max_length", "min_length", "pattern"]))
        if choice == "max_length":
            spec["metadata"], honoured = [Field(max_length=limit)], max(lengths) <= limit
        elif choice == "min_length":
            spec["metadata"], honoured = [Field(min_length=limit)], min(lengths) >= limit
        else:
            start = data.draw(st.sampled_from(spec["labels"]))[0]
            spec["metadata"] = [Field(pattern="^" + re.escape(start))]
            honoured = all(label.startswith(start) for label in spec["labels"])
    elif spec["kind"] == "enum":
        spec["metadata"], honoured = [Field(strict=True)], False  # the engine answers with the value, not the member
    else:
        spec["metadata"], honoured = [Field(strict=True)], True
    if honoured:
        cls = build(fields)
        for answer in spec["answers"]:
            first = {n: (None if "when" in s else s["answers"][0]) for n, s in fields}
            typed_model(cls).model_validate({**first, name: answer})
    else:
        assert located_at(refused(fields), f"fields.{name}")


@CORPUS
@given(class_specs(), st.data())
def test_aliases_are_refused_unless_the_class_validates_by_name(fields, data):
    name, spec = data.draw(st.sampled_from(fields))
    kind = data.draw(st.sampled_from(["alias", "validation_alias"]))
    spec["metadata"] = [*spec["metadata"], Field(**{kind: name.upper() + "_X"})]
    if data.draw(st.booleans()):
        cls = build(fields, config=ConfigDict(validate_by_name=True))
        first = {n: (None if "when" in s else s["answers"][0]) for n, s in fields}
        typed_model(cls).model_validate(first)
    else:
        assert located_at(refused(fields), f"fields.{name}")


@CORPUS
@given(class_specs(), st.data())
def test_field_values_break_no_rule_the_yaml_form_keeps(fields, data):
    """Labels, questions and option keys follow the same policy as in YAML files."""
    name, spec = data.draw(st.sampled_from(fields))
    defect = data.draw(st.sampled_from(["question", "label", "option_key"]))
    if defect == "question":
        spec["question"] = data.draw(st.text(st.sampled_from(ZERO_WIDTH + " \t\n\u3000"), max_size=3))
        location = f"fields.{name}"
    elif defect == "label" and spec["kind"] == "literal":
        if data.draw(st.booleans()):
            # (No lone surrogate here: pydantic itself cannot build a Literal holding one.)
            spec["labels"][0] += data.draw(st.sampled_from(list(LINE_BREAKS_BUT_LF + "\t\n\x00\x1b\ufffe")))
        else:
            spec["labels"][0] = data.draw(st.sampled_from(["\u200b", "\u200b\u200d", " ", " x", "x ", "\u3164"]))
            assume(spec["labels"][0] not in spec["labels"][1:])
        spec["type"] = Literal[tuple(spec["labels"])]  # type: ignore[misc]
        spec["answers"] = list(spec["labels"])
        spec["options"] = {}
        location = f"fields.{name}"
    elif spec["kind"] == "int":
        spec["options"] = {data.draw(st.sampled_from([str(spec["low"]), True, float(spec["low"])])): "described"}
        location = f"fields.{name}"
    elif spec["kind"] == "literal":
        spec["options"] = {data.draw(st.sampled_from([1, True, None])): "described"}
        location = f"fields.{name}"
    else:
        assume(False)
    for _, other in fields:  # a condition on the changed field may no longer name an allowed answer
        if name in other.get("when", {}):
            del other["when"]
    assert located_at(refused(fields), location)


@CORPUS
@given(class_specs(), st.sampled_from(["ge", "le", "gt", "lt"]), st.sampled_from([float, bool]), st.data())
def test_score_bounds_must_be_integers(fields, key, kind, data):
    """`Field(ge=0.0)` is an integral float pydantic accepts; the coercion policy does not."""
    name = data.draw(st.sampled_from([n for n, s in fields if s["kind"] == "int"] or [None]))
    assume(name is not None)
    spec = dict(fields)[name]
    bound = {"ge": spec["low"], "le": spec["high"], "gt": spec["low"] - 1, "lt": spec["high"] + 1}[key]
    assume(kind is float or bound in (0, 1))
    bounds = {"ge": spec["low"], "le": spec["high"], key: kind(bound)}
    spec["metadata"] = [Field(**bounds)]
    assert located_at(refused(fields), f"fields.{name}")


@CORPUS
@given(class_specs(), st.sampled_from(["model_copy", "model_json_schema", "model_construct", "model_extra"]))
def test_field_names_pydantic_cannot_use_are_refused(fields, reserved):
    name, spec = fields[-1]
    assume(not any(name in other.get("after", []) or name in other.get("when", {}) for _, other in fields))
    fields[-1] = (reserved, spec)
    assert located_at(refused(fields), f"fields.{reserved}")


@CORPUS
@given(
    class_specs(),
    st.sampled_from([
        ("pin_first", 1), ("pin_first", "true"), ("pin_first", None), ("max_fields_per_pass", 2.0),
        ("max_fields_per_pass", "2"), ("max_fields_per_pass", True), ("max_fields_per_pass", 0),
        ("answer_format", "IDS"), ("name", "2bad"), ("instructions", "a\u2028b"), ("instructions", 5),
    ]),
)
def test_decision_settings_are_never_coerced(fields, setting):
    key, value = setting
    assert located_at(refused(fields, **{key: value}), key)


def test_ids_need_an_id_for_every_option():
    many = Literal[tuple(f"o{i}" for i in range(MAX_ANSWER_IDS + 1))]  # type: ignore[misc]
    fields = [("pick", {"kind": "literal", "type": many, "question": "q", "metadata": [], "options": {}, "answers": []})]
    assert located_at(refused(fields, answer_format="ids"), "fields.pick.options")


def test_validators_stay_allowed_they_fail_one_row_at_decision_time():
    def no_negative(value: int) -> int:
        if value < 0:
            raise ValueError("negative")
        return value

    fields = [("level", {"kind": "int", "type": int, "question": "q", "options": {}, "answers": [],
                         "metadata": [Field(ge=-2, le=2), AfterValidator(no_negative)]})]
    assert rubric_of(build(fields)).field("level").min == -2


def test_a_forward_reference_names_the_type_and_the_field():
    fields = [("later", {"kind": "x", "type": "NotYetDefined", "question": "q", "metadata": [], "options": {}})]
    problems = refused(fields)
    assert located_at(problems, "fields.later") and "'NotYetDefined'" in problems[0].message


# --- modules that misbehave while imported -------------------------------------------------------

_MISBEHAVIOURS = {
    "exit": "import sys\nsys.exit({code})",
    "system_exit": "raise SystemExit({code})",
    "interrupt": "raise KeyboardInterrupt",
    "error": "raise ValueError({code})",
    "syntax": "def broken(:",
}


@CORPUS
@given(
    st.sampled_from(sorted(_MISBEHAVIOURS)),
    st.one_of(st.none(), st.integers(-3, 300), st.text(max_size=20)),
    st.integers(0, 5),
)
def test_modules_misbehaving_at_import_give_one_located_line(tmp_path_factory, behaviour, code, padding):
    folder = tmp_path_factory.mktemp("mod")
    path = folder / "broken.py"
    body = _MISBEHAVIOURS[behaviour].format(code=repr(code))
    path.write_text("# padding\n" * padding + body + "\n", encoding="utf-8")
    ref = f"{path}:Triage"
    with pytest.raises(RubricError) as caught:
        resolve_rubric(ref)
    (problem,) = check_refusal(caught.value, ref, user_code=True)
    assert problem.location == f"line {padding + body.count(chr(10)) + 1}"


def test_validate_never_exits_zero_when_a_module_exits_while_imported(tmp_path: Path):
    module = tmp_path / "quits.py"
    module.write_text("import sys\nsys.exit(0)\n")
    interrupted = tmp_path / "interrupts.py"
    interrupted.write_text("raise KeyboardInterrupt\n")
    result = subprocess.run(
        [sys.executable, "-m", "decisionflow.cli", "validate", f"{module}:T", f"{interrupted}:T"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"{module}:T: line 2: ") and "sys.exit(0)" in lines[0]
    assert lines[1].startswith(f"{interrupted}:T: line 1: ") and "KeyboardInterrupt" in lines[1]


def test_errors_in_a_class_imported_from_a_file_name_the_file(tmp_path: Path):
    module = tmp_path / "decl.py"
    module.write_text(
        "from typing import Annotated\nfrom pydantic import BaseModel, Field\nfrom decisionflow import ask, decision\n\n"
        "@decision\nclass Bad(BaseModel):\n    level: Annotated[int, ask('q'), Field(ge=0, le=9, multiple_of=3)]\n"
    )
    result = CliRunner().invoke(app, ["validate", f"{module}:Bad"])
    assert result.exit_code == 1
    assert result.output.startswith(f"{module}:Bad: fields.level: ") and "_decisionflow_file_" not in result.output


def test_a_forward_reference_in_a_file_names_the_file_and_the_field(tmp_path: Path):
    module = tmp_path / "later.py"
    module.write_text(
        "from __future__ import annotations\nfrom typing import Annotated, Literal\nfrom pydantic import BaseModel\n"
        "from decisionflow import ask, decision\n\n@decision\nclass Early(BaseModel):\n"
        "    tone: Annotated[Tone, ask('q')]\n\nTone = Literal['calm', 'angry']\n"
    )
    result = CliRunner().invoke(app, ["validate", f"{module}:Early"])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{module}:Early: fields.tone: ") and "'Tone'" in line and "define it above the class" in line
