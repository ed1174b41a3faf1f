"""Measurements behind the figures in docs/: one folder per figure, its runner and its raw results."""
