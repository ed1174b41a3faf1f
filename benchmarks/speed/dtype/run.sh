#!/usr/bin/env bash
# float32 against bfloat16 on the CPU: accuracy (default and raw readout) and eval time on the four
# development sets, each a seeded sample of the same rows for both dtypes, zero-shot (`--no-heads`: the
# shipped heads stay out, as when this was first measured): docs/benchmarks.md, "bfloat16 on the CPU".
# Run from anywhere on an idle machine; the sets are read from ${DATA:-../shared/data}. Writes results.json.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/dtype
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
parts=()
for dtype in float32 bfloat16; do
  .venv/bin/decisionflow eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --limit 200 --dtype $dtype --out "$TMP/sst2-$dtype"
  .venv/bin/decisionflow eval workflows/issue_triage.yaml --data "$DATA/nlbse24_issues/dev.csv" --field label --limit 150 --dtype $dtype --out "$TMP/issues-$dtype"
  .venv/bin/decisionflow eval workflows/banking77_intent.yaml --data "$DATA/banking77/dev.csv" --limit 200 --no-heads --dtype $dtype --out "$TMP/banking77-$dtype"
  .venv/bin/decisionflow eval workflows/clinc150_intent.yaml --data "$DATA/clinc150/dev.csv" --limit 300 --no-heads --dtype $dtype --out "$TMP/clinc150-$dtype"
  for set in sst2 issues banking77 clinc150; do parts+=("$set-$dtype=$TMP/$set-$dtype/eval.json"); done
done
.venv/bin/python -m benchmarks.common merge "--dtype=float32 and bfloat16" $HERE/results.json "${parts[@]}"
