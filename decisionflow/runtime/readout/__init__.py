"""From a pass's log-probabilities to each field's distribution: readout, bias correction, calibration.

`readout` sums spellings and multiplies branches into a distribution per field; `debias` divides it
by a prior; `calibration` applies a fitted temperature; `derive` answers the fields computed from
others. Kept apart from the passes (which know no fields) and from fitted heads (which read hidden
states, not only log-probabilities).
"""
