"""decisionflow: typed, closed-set decisions read from a pretrained LLM's next-token scores.

The package is laid out as the pipeline runs: `spec` (declarations, rubric, plan) → `compiler`
(prompt, layout, tries) → `runtime` → `fitting`, `batch`, `baselines` → the users of the engine side
by side: `quality`, `bench`, `scale`, `integrations`, and `serve` (whose playground routes score with
`quality`) → `cli`. `runtime` keeps its parts in rooms:
`runtime.model` (loading, check-model), `runtime.passes` (the packed pass, its backends and their `Backend`
protocol), `runtime.readout` (distributions, debias, calibration, derived fields) and `runtime.heads`
(applying fitted heads), under the modules that put them together (`runtime.engine`, `runtime.prepared`,
`runtime.executor`, `runtime.result`). `stats` (McNemar's exact test, temperature fitting and scaling,
calibration metrics, accuracy and abstention scores) sits below `runtime`, `fitting` and `quality`, which share it;
`fitting` holds every fit (heads, temperatures, the domain prior). `errors`, `paths` and `records`
sit below every step. Declaring, validating and planning need no model; `Engine` (torch + transformers)
is imported only when first used.

The names below are the public API: import them from `decisionflow` (the docs do, and a test holds them
to it), so the modules behind them may move. Beside it, three entry points have public modules of their
own: `decisionflow.serve` (the HTTP app), `decisionflow.scale` (Ray) and `decisionflow.integrations.langchain`.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import (
    CalibrationError,
    ClusterError,
    CompileError,
    ContextLengthError,
    DataError,
    DecisionflowError,
    HeadsError,
    InputError,
    ModelError,
    Problem,
    ResultError,
    RubricError,
    Unavailable,
)
from .spec import (
    AnswerFormat,
    Condition,
    FieldKind,
    FieldSpec,
    Plan,
    Round,
    Rubric,
    SchemaError,
    SchemaRubric,
    ask,
    decision,
    derive,
    dump_rubric,
    from_json_schema,
    is_decision,
    load_rubric,
    loads_rubric,
    make_plan,
    resolve_rubric,
    resolve_target,
    rubric_of,
    save_rubric,
    typed_model,
)
from .spec.declare import model_for

if TYPE_CHECKING:
    from .compiler import CompiledRubric, ReadMode, compile_rubric
    from .fitting import FitResult, fit_heads
    from .fitting.tuning import TuneResult, tune_adapter
    from .runtime.adapter import Adapter
    from .runtime.engine import Engine, EngineOptions
    from .runtime.heads.fitted import Heads
    from .runtime.model.loading import LoadedModel, load_model, load_tokenizer
    from .runtime.readout.calibration import Calibration, FieldCalibration
    from .runtime.result import Decision, FieldResult

_LAZY = {
    "Engine": ".runtime.engine",
    "EngineOptions": ".runtime.engine",
    "LoadedModel": ".runtime.model.loading",
    "load_model": ".runtime.model.loading",
    "load_tokenizer": ".runtime.model.loading",
    "Decision": ".runtime.result",
    "FieldResult": ".runtime.result",
    "Heads": ".runtime.heads.fitted",
    "Calibration": ".runtime.readout.calibration",
    "FieldCalibration": ".runtime.readout.calibration",
    "FitResult": ".fitting",
    "fit_heads": ".fitting",
    "TuneResult": ".fitting.tuning",
    "tune_adapter": ".fitting.tuning",
    "Adapter": ".runtime.adapter",
    "CompiledRubric": ".compiler",
    "ReadMode": ".compiler",
    "compile_rubric": ".compiler",
}
"""Public names whose modules need torch, transformers or a tokenizer: imported on first use, so that
`import decisionflow` stays as light as declaring and validating are."""

__all__ = [
    "Adapter", "AnswerFormat", "Calibration", "CalibrationError", "ClusterError", "CompileError", "CompiledRubric", "Condition",
    "ContextLengthError", "DataError", "Decision", "DecisionflowError", "Engine", "EngineOptions",
    "FieldCalibration", "FieldKind", "FieldResult", "FieldSpec", "FitResult", "Heads", "HeadsError", "InputError",
    "LoadedModel", "ModelError", "Plan", "Problem", "ReadMode", "ResultError", "Round", "Rubric", "RubricError",
    "SchemaError", "SchemaRubric", "Unavailable", "ask", "compile_rubric", "decision", "derive", "dump_rubric",
    "fit_heads", "from_json_schema", "is_decision", "load_model", "load_rubric", "load_tokenizer", "loads_rubric",
    "make_plan", "model_for", "resolve_rubric", "resolve_target", "rubric_of", "save_rubric", "tune_adapter", "TuneResult",
    "typed_model",
]


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read from the installed metadata only when asked (not on every import)
        from importlib.metadata import version

        return version("decisionflow")
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'decisionflow' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
