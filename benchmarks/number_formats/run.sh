#!/usr/bin/env bash
# One decoder layer's projections in each number format: docs/benchmarks.md, "One-field requests: where the time goes".
# Run from anywhere on an otherwise idle machine (every figure here is a wall-clock time or depends on one
# run's rows); writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=benchmarks/number_formats
.venv/bin/python -m benchmarks.number_formats.measure --tokens 400 --repeats 50 --out $HERE/results.json
