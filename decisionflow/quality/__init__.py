"""How good the answers are: labelled data, evaluation (`eval`: accuracy, calibration, comparisons of readouts
and wordings, with paired significance). What `calibrate` fits is fitted in `fitting`; the scores are `stats`."""
