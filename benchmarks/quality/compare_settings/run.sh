#!/usr/bin/env bash
# Are float32 and bfloat16 equivalent on the development sets, zero-shot and with fitted heads (paired test): docs/benchmarks.md, "bfloat16 on the CPU".
# Run from anywhere; the labelled sets are read from ${DATA:-../shared/data} (beside the checkout). Timings
# need an otherwise idle machine. Writes this folder's results file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/compare_settings
DATA=${DATA:-../shared/data}
.venv/bin/python -m benchmarks.quality.compare_settings.measure --a dtype=float32 --b dtype=bfloat16 --out $HERE/zero-shot.json
.venv/bin/python -m benchmarks.quality.compare_settings.measure --a dtype=float32 --b dtype=bfloat16 --fit sst2=250,banking77=10,clinc150=10,nlbse24_issues=40 --out $HERE/fitted.json
