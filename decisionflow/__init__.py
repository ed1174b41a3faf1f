"""decisionflow: typed, closed-set decisions read from a pretrained LLM's next-token scores.

Declaring, validating and planning need no model; `Engine` (torch + transformers) is imported
only when first used.
"""

from typing import TYPE_CHECKING, Any

from .declare import ask, decision, rubric_of
from .plan import Plan, make_plan
from .rubric import AnswerFormat, FieldKind, Rubric
from .rubric_yaml import dump_rubric, load_rubric

if TYPE_CHECKING:
    from .engine import Engine
    from .result import Decision, FieldResult

__all__ = [
    "AnswerFormat", "Decision", "Engine", "FieldKind", "FieldResult", "Plan", "Rubric",
    "ask", "decision", "dump_rubric", "load_rubric", "make_plan", "rubric_of",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from .engine import Engine

        return Engine
    if name in ("Decision", "FieldResult"):
        from . import result

        return getattr(result, name)
    raise AttributeError(f"module 'decisionflow' has no attribute {name!r}")
