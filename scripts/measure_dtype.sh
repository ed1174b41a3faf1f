#!/usr/bin/env bash
# float32 against bfloat16 on the CPU: accuracy (default and raw readout) and eval time on the four
# development sets, each a seeded sample of the same rows for both dtypes. Run on an idle machine:
#     bash scripts/measure_dtype.sh ../shared/data out/dtype
set -euo pipefail
DATA=${1:-../shared/data}
OUT=${2:-out/dtype}
for dtype in float32 bfloat16; do
  .venv/bin/decisionflow eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --limit 200 --dtype $dtype --out "$OUT/sst2-$dtype"
  .venv/bin/decisionflow eval workflows/issue_triage.yaml --data "$DATA/nlbse24_issues/dev.csv" --field label --limit 150 --dtype $dtype --out "$OUT/issues-$dtype"
  .venv/bin/decisionflow eval workflows/banking77_intent.yaml --data "$DATA/banking77/dev.csv" --limit 200 --dtype $dtype --out "$OUT/banking77-$dtype"
  .venv/bin/decisionflow eval workflows/clinc150_intent.yaml --data "$DATA/clinc150/dev.csv" --limit 300 --dtype $dtype --out "$OUT/clinc150-$dtype"
done
