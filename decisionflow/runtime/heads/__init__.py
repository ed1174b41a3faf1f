"""Applying fitted heads: the classifiers `fitting` learns, read from their file and run on a pass's features.

`fitted` holds the heads file (its metadata, the checks that refuse a head fitted for another model,
rubric or prompt) and each field's readout through its head; `lexical` the n-gram features of an
input's words that a lexical head reads. Fitting them lives in `decisionflow.fitting`, a later step:
this room only applies what was fitted.
"""
