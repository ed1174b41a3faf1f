"""Step 1: what is asked. Declarations (decorated classes, YAML files) become one validated rubric,
and the planner orders its fields into rounds. Pure pydantic: no torch, no tokenizer."""

from ..errors import Problem, RubricError
from .declare import ask, decision, derive, is_decision, rubric_of, typed_model
from .json_schema import SchemaError, SchemaRubric, from_json_schema
from .plan import Plan, Round, make_plan
from .references import resolve_rubric, resolve_target
from .rubric import AnswerFormat, Condition, FieldKind, FieldSpec, Rubric
from .yaml_rubric import dump_rubric, load_rubric, loads_rubric, save_rubric

__all__ = [
    "AnswerFormat", "Condition", "FieldKind", "FieldSpec", "Plan", "Problem", "Round", "Rubric", "RubricError",
    "SchemaError", "SchemaRubric", "ask", "decision", "derive", "dump_rubric", "from_json_schema", "is_decision",
    "load_rubric", "loads_rubric", "make_plan",
    "resolve_rubric", "resolve_target", "rubric_of", "save_rubric", "typed_model",
]
