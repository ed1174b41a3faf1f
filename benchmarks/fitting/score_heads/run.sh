#!/usr/bin/env bash
# A score field's ordinal head against the multinomial one on the VADER human ratings (downloads the vaderSentiment source distribution from PyPI): docs/fitting.md, "Score fields: the ordinal head".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/score_heads
DATA=${DATA:-../shared/data}
.venv/bin/python -m benchmarks.fitting.score_heads.measure --out $HERE/results.json
