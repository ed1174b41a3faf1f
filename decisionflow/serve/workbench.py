"""The playground's routes beside deciding: a rubric checked and planned, a served rubric's YAML, the rubric written
in other forms, coherence checks of one field, and an evaluation on labelled rows.

- `POST /v1/rubrics/validate` `{"rubric": "<YAML>" | "name": NAME}`: the rubric read as the inline route reads it
  (a rubric that does not validate is the same located 422 `RubricError`), then its plan: each field's round and
  what it depends on (`after`, `when`, ...), and how each field of it is read on this server (`readout`: by name
  with its calibration and fitted heads, or zero-shot; the adapter merged into the model, if any). Nothing is
  decided, nothing is compiled and no budget of new question sets is charged.

- `GET /v1/rubrics/{name}/yaml`: `{"name", "yaml"}`, the served rubric as YAML (`spec.yaml_rubric.dump_rubric`).
- `POST /v1/rubrics/export` `{"rubric": "<YAML>" | "name": NAME, "text"?: input}`: the rubric as YAML, as a
  decorated pydantic class (`@decision`), as a `/v1/systemone` request and as a `/v1/decisions` request for
  `text`. Nothing is decided.
- `POST /v1/rubrics/coherence` `{"rubric": "<YAML>", "text": input, "field": NAME}`: the field in the rubric as
  written, then in variants built by `quality.variants` (its options reversed and rotated; the field alone)
  and, for a boolean field, its question negated; each gap a number.
- `POST /v1/rubrics/eval` `{"rubric": "<YAML>" | "name": NAME, "rows": [{"text": input, "<field>": gold, ...}]}`:
  each row decided, then each labelled field scored by `quality.evaluate` (accuracy, macro-F1, ECE, reliability,
  abstention), with its confusion matrix and its coverage/accuracy curve (`stats.metrics.selective_prediction`);
  `evaluated` says how (`readout`). A served rubric given by `name` is decided as its own route decides it, with its
  calibration and fitted heads.

Every YAML rubric these routes decide is sent through `POST /v1/rubrics/decide`'s own path (`inline`): the same body
limit, API keys, error shapes, budget of new question sets and batching; a variant is a new question set like
any other. A served rubric named is decided through `POST /v1/rubrics/{name}/decide`'s path (`rubrics`).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from fastapi import Request

from ..errors import DataError
from ..fitting.readings import Reading
from ..quality.evaluate import score_abstention, score_readings
from ..quality.labelled import label_of
from ..quality.variants import choice_labels, cyclic_orders, reordered_rubric
from ..spec.plan import make_plan
from ..spec.rubric import FieldKind, FieldSpec, Rubric
from ..spec.yaml_rubric import dump_rubric
from ..stats.metrics import selective_prediction
from .body import input_shape_problem, json_type, parse_json, request_object
from .inline import read_rubric
from .refusals import HttpRefusal, Located
from .registry import field_description
from .settings import Limits

MAX_EVAL_ROWS = 100
"""Rows one `POST /v1/rubrics/eval` decides at most (each is one input's forward passes)."""
CURVE_THRESHOLDS = tuple(round(step / 20, 2) for step in range(21))
"""The confidence thresholds of the coverage/accuracy curve: 0, 0.05, ..., 1."""
MAX_SCORE_LEVELS = 10
"""A `/v1/systemone` score question takes 2 to 10 levels."""


# -- reading the request -----------------------------------------------------------------------------------------

def _rubric_text(body: dict[str, Any]) -> str:
    rubric = body.get("rubric")
    if not isinstance(rubric, str) or not rubric.strip():
        got = "nothing" if "rubric" not in body else "blank text" if isinstance(rubric, str) else json_type(rubric)
        raise Located(DataError(f"`rubric` must be the rubric's YAML text, got {got}"), "rubric")
    return rubric


def _input(body: dict[str, Any], key: str = "text") -> Any:
    if key not in body:
        raise Located(DataError(f"the request has no `{key}`"), key)
    what = input_shape_problem(body[key])
    if what is not None:
        raise Located(DataError(f"an input must be a string, an object or a list, got {what}"), key)
    return body[key]


def rubric_of_request(body: dict[str, Any], registry: Any, limits: Limits) -> Rubric:
    """The rubric a request names (`name`, served) or sends (`rubric`, YAML read as the inline route reads it)."""
    if "name" in body and "rubric" in body:
        raise Located(DataError("send either `rubric` (YAML) or `name` (a served rubric), not both"), "name")
    if "name" in body:
        name = body["name"]
        entry = registry.get(name) if isinstance(name, str) else None
        if entry is None:
            raise HttpRefusal(404, "NotFound", f"no rubric named {str(name)[:80]!r}; GET /v1/rubrics lists the rubrics "
                              "served", field="name")
        return entry.rubric
    return read_rubric(_rubric_text(body), limits)


def served_yaml(registry: Any, name: str) -> dict[str, Any]:
    entry = registry.get(name)
    if entry is None:
        raise HttpRefusal(404, "NotFound", f"no rubric named {name[:80]!r}; GET /v1/rubrics lists the rubrics served")
    return {"name": name, "yaml": dump_rubric(entry.rubric)}


# -- checking and planning ---------------------------------------------------------------------------------------

def _counted(number: int, what: str) -> str:
    return f"{number} {what}{'' if number == 1 else 's'}"


def parse_validate(body: Any, registry: Any, limits: Limits) -> tuple[Rubric, Any]:
    """The rubric a validate request sends (`rubric`, YAML) or names (`name`, served), and its registry entry."""
    body = request_object(body, shape=' ({"rubric": "<YAML>"} or {"name": NAME})', allowed=("rubric", "name"))
    rubric = rubric_of_request(body, registry, limits)
    return rubric, registry.get(body["name"]) if "name" in body else None


def adapter_description(adapter: Any) -> dict[str, Any] | None:
    """The LoRA adapter merged into the model that reads a rubric (`serve --adapter`, or the one beside it): its file's
    name (never its folder), rank, the projections it adapts and the rubric it was tuned for; None without one."""
    if adapter is None:
        return None
    metadata = adapter.metadata
    return {"file": adapter.path.name if adapter.path is not None else None, "rank": metadata.rank,
            "targets": list(metadata.targets), "tuned_for": metadata.rubric}


def readout_of(rubric: Rubric, entry: Any, adapter: Any) -> dict[str, Any]:
    """How the fields of `rubric` are read on this server: `by` `name` (a served rubric decided by its own route, with
    the calibration and fitted heads saved beside it) or `yaml` (sent inline: zero-shot); `fitted`, the fields a
    fitted head answers; `calibrated`, the fields the calibration rescales or thresholds; `adapter`, the adapter
    merged into the model that reads it (`adapter_description`)."""
    calibration = getattr(entry, "calibration", None)
    return {
        "by": "name" if entry is not None else "yaml",
        "name": entry.name if entry is not None else None,
        "fitted": [name for name in rubric.fields if entry is not None and name in entry.fitted],
        "calibrated": [name for name in rubric.fields if calibration is not None and name in calibration.fields],
        "adapter": adapter_description(adapter),
    }


def validate_answer(rubric: Rubric, entry: Any, *, pin_first: bool | None, adapter: Any) -> dict[str, Any]:
    """A rubric that validates: its fields as `GET /v1/rubrics` lists them, each with the `round` it is read in (None
    for a derived field, computed from others), its plan, how it is read (`readout_of`) and a one-line summary."""
    plan = make_plan(rubric, pin_first=pin_first)
    rounds = {name: round_.index for round_ in plan.rounds for name in round_.fields}
    fields = [{**field_description(spec), "round": rounds.get(spec.name)} for spec in rubric]
    derived = f", {_counted(len(plan.derived), 'derived field')}" if plan.derived else ""
    return {
        "valid": True,
        "rubric": rubric.name,
        "summary": f"valid: {_counted(len(fields), 'field')}, {_counted(plan.forward_passes, 'round')}{derived}",
        "fields": fields,
        "plan": {**plan.to_dict(), "forward_passes": plan.forward_passes},
        "readout": readout_of(rubric, entry, adapter),
    }


# -- the rubric in other forms -----------------------------------------------------------------------------------

def class_name(name: str) -> str:
    words = [word for word in re.split(r"[^0-9A-Za-z]+", name) if word]
    text = "".join(word[:1].upper() + word[1:] for word in words) or "Decision"
    return text if text[0].isalpha() else "D" + text


def python_source(rubric: Rubric) -> str:
    """The rubric as a decorated pydantic class; `decisionflow.rubric_of` reads it back equal. A rubric using what
    `@decision` and `ask` cannot write here (derived fields, options chosen by another field, per-field readout
    corrections, catalogs, examples, literals) is a `DataError` naming it."""
    unsupported = [key for key in ("catalog", "examples", "debias") if getattr(rubric, key)]
    if rubric.reading.value != "shared" or rubric.input_turns or rubric.max_input_tokens is not None:
        unsupported.append("reading, input_turns or max_input_tokens")
    for spec in rubric:
        for key in ("derive", "options_by", "catalog", "debias", "marginalize", "literals"):
            if getattr(spec, key, None):
                unsupported.append(f"fields.{spec.name}.{key}")
        if not spec.name.isidentifier() or spec.name in {"True", "False", "None", "class", "def", "model_config"}:
            unsupported.append(f"the field name {spec.name!r}")
    if unsupported:
        raise DataError(f"this rubric cannot be written as a class here: it uses {', '.join(unsupported)}")
    arguments = [f"name={rubric.name!r}"]
    if rubric.instructions:
        arguments.append(f"instructions={rubric.instructions!r}")
    if rubric.answer_format.value != "labels":
        arguments.append(f"answer_format={rubric.answer_format.value!r}")
    if rubric.pin_first is not True:
        arguments.append("pin_first=False")
    if rubric.max_fields_per_pass is not None:
        arguments.append(f"max_fields_per_pass={rubric.max_fields_per_pass!r}")
    lines = ["from typing import Annotated, Literal", "", "from pydantic import BaseModel, Field", "",
             "from decisionflow import ask, decision", "", "",
             f"@decision({', '.join(arguments)})", f"class {class_name(rubric.name)}(BaseModel):"]
    for spec in rubric:
        lines.extend(_field_lines(spec))
    return "\n".join(lines) + "\n"


def _field_lines(spec: FieldSpec) -> list[str]:
    ask = [repr(spec.question)]
    if spec.kind is FieldKind.CHOICE:
        labels = list(spec.options or {})
        typed = f"Literal[{', '.join(repr(label) for label in labels)}]"
        if any((spec.options or {}).values()):
            ask.append("options={" + ", ".join(f"{label!r}: {text!r}" for label, text in (spec.options or {}).items()) + "}")
    elif spec.kind is FieldKind.BOOLEAN:
        typed = "bool"
    else:
        typed = "int"
    if spec.after:
        ask.append(f"after={list(spec.after)!r}")
    if spec.when is not None:
        ask.append(f"when={{{spec.when.field!r}: {list(spec.when.values)!r}}}")
    parts = [typed, f"ask({', '.join(ask)})"]
    if spec.kind is FieldKind.SCORE:
        parts.append(f"Field(ge={spec.min!r}, le={spec.max!r})")
    if spec.when is not None:
        parts[0] = f"{typed} | None"
    default = " = None" if spec.when is not None else ""
    return [f"    {spec.name}: Annotated[", *(f"        {part}," for part in parts), f"    ]{default}"]


def systemone_request(rubric: Rubric, text: Any) -> dict[str, Any]:
    """A `/v1/systemone` request asking each field as an independent question about `text`."""
    questions: dict[str, Any] = {}
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            questions[spec.name] = {"type": "noul", "instructions": spec.question}
        elif spec.kind is FieldKind.CHOICE:
            questions[spec.name] = {"type": "choice", "instructions": spec.question,
                                    "criteria": {label: text or None for label, text in (spec.options or {}).items()}}
        elif spec.max - spec.min + 1 <= MAX_SCORE_LEVELS:  # type: ignore[operator]
            questions[spec.name] = {"type": "score", "instructions": spec.question,
                                    "criteria": [str(level) for level in range(spec.min, spec.max + 1)]}  # type: ignore[arg-type]
    return {"state": text, "questions": questions}


def decisions_request(rubric: Rubric, text: Any, model: str) -> dict[str, Any]:
    """A `/v1/decisions` request asking each field as an independent question about `text`."""
    questions: list[dict[str, Any]] = []
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            questions.append({"type": "predicate", "name": spec.name, "instructions": spec.question})
        elif spec.kind is FieldKind.CHOICE:
            choices = [{"value": label, **({"description": text} if text else {})} for label, text in (spec.options or {}).items()]
            questions.append({"type": "choice", "name": spec.name, "instructions": spec.question, "choices": choices})
        else:
            levels = [{"label": str(level)} for level in range(spec.min, spec.max + 1)]  # type: ignore[arg-type]
            questions.append({"type": "score", "name": spec.name, "instructions": spec.question, "levels": levels})
    return {"model": model, "input": text, "questions": questions}


def export(body: Any, registry: Any, limits: Limits, model: str) -> dict[str, Any]:
    body = request_object(body, shape=' ({"rubric": "<YAML>" or "name": NAME, "text": ...})',
                          allowed=("rubric", "name", "text"))
    rubric = rubric_of_request(body, registry, limits)
    text = _input(body) if "text" in body else ""
    try:
        python, python_problem = python_source(rubric), None
    except DataError as error:
        python, python_problem = None, str(error)
    dropped = [spec.name for spec in rubric if spec.kind is FieldKind.SCORE and spec.max - spec.min + 1 > MAX_SCORE_LEVELS]  # type: ignore[operator]
    notes = ["/v1/systemone and /v1/decisions read every question on its own: `after` and `when` are not carried"]
    if dropped:
        notes.append(f"/v1/systemone takes at most {MAX_SCORE_LEVELS} score levels: left out {', '.join(dropped)}")
    return {"name": rubric.name, "yaml": dump_rubric(rubric), "python": python, "python_problem": python_problem,
            "systemone": systemone_request(rubric, text), "decisions": decisions_request(rubric, text, model),
            "notes": notes}


# -- coherence ---------------------------------------------------------------------------------------------------

def negated_question(question: str) -> str:
    """The question's negation as the coherence check words it: "Whether X" becomes "Whether it is NOT the case
    that X"; any other question "Is it NOT the case that: <question>"."""
    text = question.strip()
    if text.lower().startswith("whether "):
        return "Whether it is NOT the case that " + text[len("whether "):]
    return "Is it NOT the case that: " + text


def coherence_variants(rubric: Rubric, name: str) -> list[dict[str, Any]]:
    """The variants checked for field `name`, each `{"check", "variant", "rubric", ...}`."""
    spec = rubric.field(name)
    variants: list[dict[str, Any]] = []
    if spec.kind is FieldKind.CHOICE and spec.options_by is None:
        labels = choice_labels(rubric, name)
        orders = {"reversed": labels[::-1]}
        if len(labels) > 2:
            orders["rotated"] = cyclic_orders(labels, len(labels))[1]
        for variant, order in orders.items():
            variants.append({"check": "order", "variant": variant, "order": order,
                             "rubric": reordered_rubric(rubric, name, order)})
    if spec.options_by is None and spec.derive is None:
        data = rubric.model_dump(mode="json")
        alone = {key: value for key, value in data["fields"][name].items() if key not in ("after", "when")}
        data["fields"] = {name: alone}
        data["examples"] = []
        variants.append({"check": "alone", "variant": "one-field rubric", "rubric": Rubric.model_validate(data)})
    if spec.kind is FieldKind.BOOLEAN:
        data = rubric.model_dump(mode="json")
        question = negated_question(spec.question)
        data["fields"][name]["question"] = question
        data["examples"] = []
        variants.append({"check": "negation", "variant": "negated question", "question": question,
                         "rubric": Rubric.model_validate(data)})
    return variants


def _probabilities(answer: dict[str, Any], name: str) -> tuple[Any, dict[str, float], bool]:
    field = answer["fields"][name]
    return field.get("value"), dict(field.get("probabilities") or {}), field.get("asked", True)


def _largest_move(before: dict[str, float], after: dict[str, float]) -> float | None:
    labels = set(before) & set(after)
    return max(abs(after[label] - before[label]) for label in labels) if labels else None


def coherence_answer(name: str, kind: str, base: dict[str, Any], checked: list[tuple[dict[str, Any], dict[str, Any]]]
                     ) -> dict[str, Any]:
    value, probabilities, asked = _probabilities(base, name)
    checks = []
    for variant, answer in checked:
        got, got_p, got_asked = _probabilities(answer, name)
        entry: dict[str, Any] = {key: item for key, item in variant.items() if key != "rubric"}
        entry.update(value=got, probabilities=got_p, asked=got_asked)
        if variant["check"] == "negation":
            p_true, p_true_negated = probabilities.get("true"), got_p.get("true")
            gap = None if p_true is None or p_true_negated is None else abs(p_true - (1 - p_true_negated))
            entry.update(gap=gap, p_true=p_true, p_true_negated=p_true_negated,
                         consistent=None if value is None or got is None else got != value)
        else:
            entry.update(gap=_largest_move(probabilities, got_p), consistent=got == value,
                         answer_probability=got_p.get(label_of(value) if value is not None else "", None))
        checks.append(entry)
    return {"field": name, "kind": kind, "value": value, "probabilities": probabilities, "asked": asked,
            "answer_probability": probabilities.get(label_of(value)) if value is not None else None, "checks": checks}


def parse_coherence(body: Any, limits: Limits) -> tuple[Rubric, str, Any]:
    body = request_object(body, shape=' ({"rubric": "<YAML>", "text": ..., "field": NAME})',
                          allowed=("rubric", "text", "field"))
    text = _rubric_text(body)
    given = _input(body)
    name = body.get("field")
    if not isinstance(name, str):
        raise Located(DataError(f"`field` must name one field of the rubric, got {json_type(name)}"), "field")
    rubric = read_rubric(text, limits)
    if name not in rubric.fields:
        raise Located(DataError(f"the rubric has no field {name[:80]!r} (its fields: {', '.join(rubric.fields)})"), "field")
    return rubric, name, given


# -- evaluation --------------------------------------------------------------------------------------------------

def parse_eval(body: Any, limits: Limits, registry: Any = None) -> tuple[Rubric, list[dict[str, Any]], Any]:
    """The rubric (`rubric`, YAML, or `name`, a served rubric), the rows and the served rubric's registry entry
    (None for YAML)."""
    body = request_object(body, shape=' ({"rubric": "<YAML>" or "name": NAME, "rows": [{"text": ..., "<field>": gold}, ...]})',
                          allowed=("rubric", "name", "rows"))
    if "name" in body and "rubric" in body:
        raise Located(DataError("send either `rubric` (YAML) or `name` (a served rubric), not both"), "name")
    text = None if "name" in body else _rubric_text(body)
    rows = body.get("rows")
    if not isinstance(rows, list) or not rows:
        got = "an empty list" if rows == [] else "nothing" if rows is None else json_type(rows)
        raise Located(DataError(f"`rows` must be a list of labelled rows ({{\"text\": ..., \"<field>\": gold}}), got {got}"),
                      "rows")
    if len(rows) > MAX_EVAL_ROWS:
        raise Located(DataError(f"at most {MAX_EVAL_ROWS} rows are evaluated in one request, got {len(rows)}"), "rows")
    for index, row in enumerate(rows):
        if not isinstance(row, dict):
            raise Located(DataError(f"a row must be an object, got {json_type(row)}"), f"rows[{index}]")
        try:
            _input(row)
        except Located as refused:
            raise Located(refused.error, f"rows[{index}].{refused.field}") from None
    if text is not None:
        return read_rubric(text, limits), rows, None
    rubric = rubric_of_request({"name": body["name"]}, registry, limits)
    return rubric, rows, registry.get(body["name"])


def gold_label(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, (bool, int, float, str)):
        return label_of(value) if not isinstance(value, str) else value.strip()
    return json.dumps(value)


def reading_of(answer: dict[str, Any] | None, name: str, error: str) -> Reading:
    if answer is None:
        return Reading(None, error=error or "not decided")
    field = answer["fields"].get(name) or {}
    if field.get("asked") is False or field.get("value") is None:
        return Reading(None, dict(field.get("probabilities") or {}), field.get("candidate_mass"))
    return Reading(label_of(field["value"]), dict(field.get("probabilities") or {}), field.get("candidate_mass"),
                   bool(field.get("abstained")))


def eval_answer(rubric: Rubric, rows: list[dict[str, Any]], answers: list[dict[str, Any] | None], errors: list[str],
                evaluated: dict[str, Any] | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for spec in rubric:
        labelled = [(i, gold_label(row.get(spec.name))) for i, row in enumerate(rows)]
        labelled = [(i, gold) for i, gold in labelled if gold is not None]
        if not labelled:
            continue
        gold = [g for _, g in labelled]
        readings = [reading_of(answers[i], spec.name, errors[i]) for i, _ in labelled]
        options = [str(label) for label in spec.labels]
        summary = score_readings(gold, readings, options, score=spec.kind is FieldKind.SCORE)
        summary["abstention"] = score_abstention(gold, readings, options)
        columns = options + ["(none)"]
        matrix = [[0] * len(columns) for _ in options]
        for g, reading in zip(gold, readings):
            if g in options:
                predicted = reading.predicted if reading.predicted in options else "(none)"
                matrix[options.index(g)][columns.index(predicted)] += 1
        summary["confusion"] = {"gold": options, "predicted": columns, "counts": matrix}
        answered = [(r.confidence, r.predicted == g) for g, r in zip(gold, readings) if g in options and r.confidence is not None]
        curve = []
        for threshold in CURVE_THRESHOLDS:
            point = selective_prediction([c for c, _ in answered], [ok for _, ok in answered], threshold)
            curve.append({"threshold": threshold, "coverage": point.coverage if answered else None,
                          "accuracy": point.accuracy})
        summary["coverage_curve"] = curve
        fields[spec.name] = summary
    ignored = sorted({key for row in rows for key in row if key != "text" and key not in rubric.fields})
    answer = {"rubric": rubric.name, "rows": len(rows), "errors": sum(bool(e) for e in errors), "fields": fields,
              "ignored_columns": ignored}
    if evaluated is not None:
        answer["evaluated"] = evaluated
    return answer


# -- the routes --------------------------------------------------------------------------------------------------

def add_workbench_routes(app: Any, service: Any, inline: Any, limits: Limits, *, answered: Any, json_answer: Any,
                         refused: Any) -> None:
    """Wire the routes above on `app`: `answered(request, work)` is the app's wrapper of a POST (body type, limits,
    deadline, errors), `json_answer(body)` its JSON answer and `refused(request, error)` its error answer."""
    registry = service.registry

    async def decided(rubric: Rubric, text: Any, note: Any) -> dict[str, Any]:
        raw = json.dumps({"rubric": dump_rubric(rubric), "text": text}).encode()
        return await service.question_set(inline, raw, note)

    def pin_first() -> bool | None:
        return getattr(getattr(service.engine, "options", None), "pin_first", None)

    def adapter_reading(entry: Any) -> Any:
        """The adapter merged into the model that reads a served rubric (its own, beside it), or a YAML one (the server's)."""
        engine = service.engines.for_entry(entry) if entry is not None else service.engine
        return getattr(engine, "adapter", None)

    @app.post("/v1/rubrics/validate")
    async def rubric_validate(request: Request) -> Any:
        """A YAML rubric (or a served one by name) checked and planned, nothing decided (see `validate_answer`)."""
        async def work(raw: bytes, note: Any) -> Any:
            def check() -> dict[str, Any]:
                rubric, entry = parse_validate(parse_json(raw), registry, limits)
                return validate_answer(rubric, entry, pin_first=pin_first(), adapter=adapter_reading(entry))
            return await service.off_loop(check)
        return await answered(request, work)

    @app.get("/v1/rubrics/{name}/yaml")
    async def rubric_yaml(name: str, request: Request) -> Any:
        """A served rubric as YAML: `{"name", "yaml"}`."""
        try:
            return json_answer(served_yaml(registry, name))
        except Exception as error:  # noqa: BLE001 - a rubric YAML cannot write (a derived rule in Python) is refused as such
            return refused(request, error)

    @app.post("/v1/rubrics/export")
    async def rubric_export(request: Request) -> Any:
        """The rubric as YAML, a `@decision` class, a `/v1/systemone` and a `/v1/decisions` request."""
        async def work(raw: bytes, note: Any) -> Any:
            return await service.off_loop(lambda: export(parse_json(raw), registry, limits, service.model_name))
        return await answered(request, work)

    @app.post("/v1/rubrics/coherence")
    async def rubric_coherence(request: Request) -> Any:
        """One field of a YAML rubric against its variants on one input (see `coherence_variants`)."""
        async def work(raw: bytes, note: Any) -> Any:
            rubric, name, text = await service.off_loop(lambda: parse_coherence(parse_json(raw), limits))
            variants = await service.off_loop(lambda: coherence_variants(rubric, name))
            base = await decided(rubric, text, note)
            checked = [(variant, await decided(variant["rubric"], text, note)) for variant in variants]
            return coherence_answer(name, rubric.field(name).kind.value, base, checked)
        return await answered(request, work)

    @app.post("/v1/rubrics/eval")
    async def rubric_eval(request: Request) -> Any:
        """A YAML rubric, or a served one by name, scored on labelled rows (see `eval_answer`)."""
        async def work(raw: bytes, note: Any) -> Any:
            rubric, rows, entry = await service.off_loop(lambda: parse_eval(parse_json(raw), limits, registry))
            answers: list[dict[str, Any] | None] = [None] * len(rows)
            errors = [""] * len(rows)
            if entry is not None:
                note.rubric = entry.name

            async def decide(text: Any) -> dict[str, Any]:
                if entry is None:
                    return await decided(rubric, text, note)
                # As `POST /v1/rubrics/{name}/decide` decides it: its calibration and heads applied.
                decision = await service.decide_one(("rubric", entry.name), entry.rubric, entry.calibration, entry.heads,
                                                    text, "text", note)
                return decision.to_dict()

            async def one(index: int) -> None:
                try:
                    answers[index] = await decide(rows[index]["text"])
                except Located as refused:
                    if refused.field != "text":
                        raise
                    errors[index] = str(refused)

            await one(0)  # the first row prepares the rubric (charged once); the others are batched together
            await asyncio.gather(*(one(index) for index in range(1, len(rows))))
            evaluated = readout_of(rubric, entry, adapter_reading(entry))
            return await service.off_loop(lambda: eval_answer(rubric, rows, answers, errors, evaluated))
        return await answered(request, work)
