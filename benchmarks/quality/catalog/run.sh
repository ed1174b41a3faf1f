#!/usr/bin/env bash
# Catalog strategies (full, labels, none): accuracy on the development sets (docs/engine.md, "Catalog strategies") and speed on the 255-label preset (docs/benchmarks.md, "Huge option sets").
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/catalog
DATA=${DATA:-../shared/data}
.venv/bin/python -m benchmarks.quality.catalog.measure --data "$DATA" --part all --out $HERE/results.json
