"""Learning from labelled rows: heads fitted on what the engine's passes read, chosen per field on
cross-validated evidence against the zero-shot readout. The runtime applies what is fitted here
(`runtime.heads`); this step only learns, through the engine's public API (`Engine.read_features`)."""

from .head_fit import Example, FitResult, examples_of, fit_examples, fit_heads

__all__ = ["Example", "FitResult", "examples_of", "fit_examples", "fit_heads"]
