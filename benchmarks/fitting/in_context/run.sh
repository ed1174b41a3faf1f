#!/usr/bin/env bash
# In-context examples against zero-shot and fitted heads: docs/fitting.md, "In-context examples, measured against fitted heads".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/in_context
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
.venv/bin/python -m benchmarks.fitting.in_context.measure --sets sst2 --order-seeds 0,1,2 --out $TMP/sst2.json
.venv/bin/python -m benchmarks.fitting.in_context.measure --sets banking77,clinc150 --out $TMP/intents.json
.venv/bin/python -m benchmarks.fitting.in_context.measure --sets clinc150 --ks 1 --order-seeds 1,2 --out $TMP/clinc150-k1-orders.json
.venv/bin/python -m benchmarks.fitting.in_context.measure --sets nlbse24_issues --out $TMP/issues.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json sst2=$TMP/sst2.json intents=$TMP/intents.json clinc150_k1_orders=$TMP/clinc150-k1-orders.json issues=$TMP/issues.json
