#!/usr/bin/env bash
# CLINC150 flat against domain-then-intent, and where the hierarchy loses: docs/evaluation.md, "Flat, greedy and marginalised hierarchical CLINC150".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/hierarchy
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
.venv/bin/python -m benchmarks.quality.hierarchy.measure --data "$DATA" --out $TMP/variants.json
.venv/bin/python -m benchmarks.quality.hierarchy.measure --data "$DATA" --variants marginalised_10 --debias content_free --out $TMP/variants.json
.venv/bin/python -m benchmarks.quality.hierarchy.measure --data "$DATA" --variants flat,marginalised_10 --debias content_free_half --out $TMP/defaults.json
.venv/bin/python -m benchmarks.quality.hierarchy.measure --data "$DATA" --diagnose --out $TMP/diagnosis.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json variants=$TMP/variants.json defaults=$TMP/defaults.json diagnosis=$TMP/diagnosis.json
