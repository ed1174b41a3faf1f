#!/usr/bin/env bash
# Fitted heads: the learning curve (docs/fitting.md, "Fitted heads on the development sets"), which layers, and what a head costs a request.
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/heads
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
.venv/bin/python -m benchmarks.fitting.heads.measure --sets sst2,banking77,clinc150,nlbse24_issues --study curve --layers=-1,-8 --out $TMP/curve.json
.venv/bin/python -m benchmarks.fitting.heads.measure --study layers --sets banking77,nlbse24_issues --out $TMP/layers.json
.venv/bin/python -m benchmarks.fitting.heads.measure --sets banking77 --study overhead --out $TMP/overhead.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json curve=$TMP/curve.json layers=$TMP/layers.json overhead=$TMP/overhead.json
