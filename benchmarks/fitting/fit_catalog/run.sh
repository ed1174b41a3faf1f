#!/usr/bin/env bash
# Does listing BANKING77's 77 intents in the prompt help a fitted head? `decisionflow fit` on every training
# row (hidden states alone, `--no-words`, as first measured) under the shipped rubric (`auto`: no catalog above 20 options) and with `catalog: full` added, float32:
# docs/fitting.md, "What does not help". Run from anywhere; the set is read from ${DATA:-../shared/data}.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/fit_catalog
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
for catalog in auto full; do
  mkdir -p $TMP/$catalog
  cp workflows/banking77_intent.yaml $TMP/$catalog/banking77_intent.yaml
  [ $catalog = auto ] || echo "catalog: $catalog" >> $TMP/$catalog/banking77_intent.yaml
  .venv/bin/decisionflow fit $TMP/$catalog/banking77_intent.yaml --data "$DATA/banking77/train.csv" --dtype float32 --no-words --json > $HERE/$catalog.json
done
.venv/bin/python -m benchmarks.common stamp --dtype=float32 $HERE/auto.json $HERE/full.json
