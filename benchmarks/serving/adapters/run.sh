#!/usr/bin/env bash
# Serving throughput when routes read the model under different adapters: docs/serving.md, "Tuned adapters".
# Timings need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/adapters
.venv/bin/python -m benchmarks.serving.adapters.measure --out $HERE/results.json
