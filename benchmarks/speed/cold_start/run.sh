#!/usr/bin/env bash
# Cold CLI runs of the 32-field support_triage rubric: docs/benchmarks.md, "Cold starts".
# Run from anywhere on an otherwise idle machine (every figure here is a wall-clock time or depends on one
# run's rows); writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/cold_start
.venv/bin/python -m benchmarks.speed.cold_start.measure --rubric support_triage --runs 4 --out $HERE/results.json
