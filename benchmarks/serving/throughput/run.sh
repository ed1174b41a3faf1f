#!/usr/bin/env bash
# Serving throughput with and without micro-batching, and the plain batch run against Ray: docs/serving.md, "Throughput and micro-batching", and docs/scaling.md, "Throughput on this machine".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/throughput
DATA=${DATA:-../shared/data}
.venv/bin/python -m benchmarks.serving.throughput.measure --out $HERE/results.json
