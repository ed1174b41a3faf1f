"""Learning from labelled rows: heads fitted on what the engine's passes read, chosen per field on
cross-validated evidence against the zero-shot readout. The runtime applies what is fitted here
(`runtime.heads`); this step only learns, through the engine's public API (`Engine.read_features`).

`examples` reads the labelled rows, `features` what a head reads per field, `training` the heads'
models, `choosing` the cross-validated choice per field, `head_fit` the whole fit (`fit_heads`);
`lexical` the n-gram head's vocabulary and regression."""

from .examples import Example, examples_of
from .head_fit import FitResult, fit_examples, fit_heads

__all__ = ["Example", "FitResult", "examples_of", "fit_examples", "fit_heads"]
