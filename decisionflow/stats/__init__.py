"""Statistics shared by the steps that measure: paired tests, temperature fitting, calibration metrics, and
the scores of closed-set answers (`metrics`: accuracy, macro-F1, agreement, abstention).

`fitting` (choosing a head over zero-shot), `quality` (eval, calibrate), `bench` and the benchmark
scripts all compare readouts on the same rows and fit temperatures; neither of the first two may import
the other, so each kept its own copy. Here they have one, below both: the modules import only the
standard library, numpy and (lazily, where a fit needs its optimiser) scipy, never another step.
"""

from . import metrics
from .calibration import (
    DEFAULT_BINS,
    ReliabilityBin,
    expected_calibration_error,
    negative_log_likelihood,
    reliability_bins,
    temperature_scale,
)
from .paired import McNemar, mcnemar, mcnemar_exact
from .temperature import LOG_TEMPERATURE_RANGE, SCORE_LOG_BOUNDS, fit_score_temperature, fit_temperature

__all__ = [
    "DEFAULT_BINS", "LOG_TEMPERATURE_RANGE", "McNemar", "ReliabilityBin", "SCORE_LOG_BOUNDS", "expected_calibration_error",
    "fit_score_temperature", "fit_temperature", "mcnemar", "mcnemar_exact", "negative_log_likelihood", "reliability_bins",
    "metrics", "temperature_scale",
]
