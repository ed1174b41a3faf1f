#!/usr/bin/env bash
# torch.compile of the packed pass, each MLP and the whole layer stack: docs/benchmarks.md, "torch.compile of the packed pass: tried, not kept".
# Run from anywhere on an otherwise idle machine (every figure here is a wall-clock time or depends on one
# run's rows); writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/compile
TMP=$(mktemp -d)
.venv/bin/python -m benchmarks.speed.compile.measure --target mlp --out $TMP/mlp.json
.venv/bin/python -m benchmarks.speed.compile.measure --target layers --out $TMP/layers.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json mlp=$TMP/mlp.json layers=$TMP/layers.json
