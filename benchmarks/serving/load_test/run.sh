#!/usr/bin/env bash
# The server under a quiet and then a hostile stream of clients: docs/serving.md, "Under a hostile stream".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/load_test
DATA=${DATA:-../shared/data}
.venv/bin/python scripts/load_test_serve.py --out $HERE/results.json
.venv/bin/python -m benchmarks.common stamp $HERE/results.json
