"""`python -m decisionflow.cli`: the same command line as the `decisionflow` script."""

from . import app

app(prog_name="decisionflow")
