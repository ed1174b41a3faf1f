"""Learning from labelled rows: every fit the engine applies. Heads fitted on what the engine's passes read,
chosen per field on cross-validated evidence against the zero-shot readout; the calibration's temperatures
and thresholds (`calibrate --data`); the domain prior (`calibrate --unlabelled`). The runtime applies what is
fitted here (`runtime.heads`, `runtime.readout.calibration`); this step only learns, through the engine's
public API (`Engine.read_features`, `decide_many`).

`examples` reads the labelled rows, `features` what a head reads per field, `training` the heads'
models, `choosing` the cross-validated choice per field, `head_fit` the whole fit (`fit_heads`);
`lexical` the n-gram head's vocabulary and regression. `readings` reads fields of many rows through the
engine (for the fits below and for `quality`'s evaluation), `temperatures` fits the calibration file,
`domain_prior` a field's prior from unlabelled rows, `corrections` the priors estimated from rows."""

from .examples import Example, examples_of
from .head_fit import FitResult, fit_examples, fit_heads

__all__ = ["Example", "FitResult", "examples_of", "fit_examples", "fit_heads"]
