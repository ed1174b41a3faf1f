#!/usr/bin/env bash
# Independent questions against the shared reading: accuracy on the development sets, paired (docs/engine.md,
# "Independent questions"), and what the reading costs (the same section).
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results files.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/independent
DATA=${DATA:-../shared/data}
.venv/bin/python -m benchmarks.quality.independent.measure --part accuracy --data "$DATA" --out $HERE/accuracy.json
.venv/bin/python -m benchmarks.quality.independent.measure --part speed --out $HERE/speed.json
.venv/bin/python -m benchmarks.quality.independent.against_filed --out $HERE/speed-against-filed.json
for dtype in bfloat16 float32; do
  .venv/bin/python -m benchmarks.quality.independent.measure --part independence --dtype $dtype --out $HERE/independence-$dtype.json
done
.venv/bin/python -m benchmarks.quality.independent.one_call --out $HERE/one-call.json
