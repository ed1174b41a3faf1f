"""decisionflow: typed, closed-set decisions read from a pretrained LLM's next-token scores.

The package is laid out as the pipeline runs: `spec` (declarations, rubric, plan) → `compiler`
(prompt, layout, tries) → `runtime` → `fitting`, `batch`, `baselines` → the users of the engine side
by side: `quality`, `bench`, `serve`, `scale`, `integrations` → `cli`. `runtime` keeps its parts in rooms:
`runtime.model` (loading, check-model), `runtime.passes` (the packed pass, its backends and their `Backend`
protocol), `runtime.readout` (distributions, debias, calibration, derived fields) and `runtime.heads`
(applying fitted heads), under the modules that put them together (`runtime.engine`, `runtime.prepared`,
`runtime.executor`, `runtime.result`). `stats` (McNemar's exact test, temperature fitting,
calibration metrics) sits below `fitting` and `quality`, which share it. Declaring, validating and planning need no model;
`Engine` (torch + transformers) is imported only when first used.
"""

from typing import TYPE_CHECKING, Any

from .errors import DecisionflowError
from .spec import (
    AnswerFormat,
    FieldKind,
    Plan,
    Rubric,
    SchemaRubric,
    ask,
    decision,
    derive,
    dump_rubric,
    from_json_schema,
    load_rubric,
    make_plan,
    rubric_of,
)

if TYPE_CHECKING:
    from .fitting import fit_heads
    from .runtime.engine import Engine
    from .runtime.result import Decision, FieldResult

__all__ = [
    "AnswerFormat", "Decision", "DecisionflowError", "Engine", "FieldKind", "FieldResult", "Plan", "Rubric",
    "SchemaRubric", "ask", "decision", "derive", "dump_rubric", "fit_heads", "from_json_schema", "load_rubric",
    "make_plan", "rubric_of",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read from the installed metadata only when asked (not on every import)
        from importlib.metadata import version

        return version("decisionflow")
    if name == "Engine":
        from .runtime.engine import Engine

        return Engine
    if name == "fit_heads":
        from .fitting import fit_heads

        return fit_heads
    if name in ("Decision", "FieldResult"):
        from .runtime import result

        return getattr(result, name)
    raise AttributeError(f"module 'decisionflow' has no attribute {name!r}")
