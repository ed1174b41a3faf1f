#!/usr/bin/env bash
# Readout corrections side by side (raw, content-free, domain priors, permutations, wording): docs/evaluation.md, "Readout corrections (debias) and the default".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/debias
DATA=${DATA:-../shared/data}
RUNS=${RUNS:-$(mktemp -d)}   # the raw per-row runs (megabytes; reused when a run is resumed with RUNS=...)
.venv/bin/python -m benchmarks.quality.debias.measure --data "$DATA" --sets sst2 --orders 2 --out $RUNS \
    --wording sst2:written=$HERE/wordings/sentiment_written.yaml \
    --wording sst2:short_descriptions=$HERE/wordings/sentiment_short_descriptions.yaml
.venv/bin/python -m benchmarks.quality.debias.measure --data "$DATA" --sets banking77 --limit 400 --orders 4 --out $RUNS
.venv/bin/python -m benchmarks.quality.debias.measure --data "$DATA" --sets issues,clinc150 --limit 300 --orders 2 --permutation-rows 100 --out $RUNS
cp $RUNS/summary.json $HERE/results.json
cp $RUNS/summary.md $HERE/results.md
