"""`python -m decisionflow.cli`: the same command line as the `decisionflow` script."""

from . import entry

entry()
