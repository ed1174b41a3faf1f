#!/usr/bin/env bash
# Does an answer depend on what shares its pass (float32 and bfloat16): docs/engine.md, "Batching".
# Run from anywhere on an otherwise idle machine (every figure here is a wall-clock time or depends on one
# run's rows); writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/batch_dependence
.venv/bin/python -m benchmarks.quality.batch_dependence.measure --out $HERE/results.json
