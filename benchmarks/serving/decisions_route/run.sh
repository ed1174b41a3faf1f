#!/usr/bin/env bash
# The 28-field presets as /v1/decisions questions, through the openai SDK against the engine in process: docs/decisions.md, "Numbers".
# Run from anywhere on an otherwise idle machine; writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/decisions_route
.venv/bin/python -m benchmarks.serving.decisions_route.measure --repeats 10 --out $HERE/results.json
