"""How good the answers are: labelled data, metrics, evaluation, and fitting calibrations."""
