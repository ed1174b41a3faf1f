#!/usr/bin/env bash
# The figures of docs/evaluation.md, "Results on this machine", that come from `decisionflow eval` and
# `calibrate` themselves: the model's own probabilities (`--raw`), temperature calibration of SST-2,
# abstention on CLINC150's out-of-scope rows, and unconstrained JSON generation beside decisionflow.
# The shipped heads stay out (`--no-heads`): these figures are the zero-shot readout's. Run from anywhere;
# the sets are read from ${DATA:-../shared/data}. Writes results.json (each run's eval.json or calibration).
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=benchmarks/evaluation
DATA=${DATA:-../shared/data}
TMP=$(mktemp -d)
DF=.venv/bin/decisionflow
$DF eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --limit 200 --shuffle-options 2 --raw --out $TMP/raw-sst2
$DF eval workflows/banking77_intent.yaml --data "$DATA/banking77/dev.csv" --limit 200 --raw --no-heads --out $TMP/raw-banking77
$DF eval workflows/issue_triage.yaml --data "$DATA/nlbse24_issues/dev.csv" --field label --limit 150 --raw --out $TMP/raw-issues
$DF calibrate workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --rows 0:100 --output $TMP/sentiment.calibration.json
$DF eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --rows 100: --raw --out $TMP/calibration-sst2-raw
$DF eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --rows 100: --calibration $TMP/sentiment.calibration.json \
  --min-probability 0.7 --out $TMP/calibration-sst2-calibrated
$DF calibrate workflows/clinc150_intent.yaml --data "$DATA/clinc150/dev.csv" --rows 0:425 --fit-min-mass --no-heads \
  --output $TMP/clinc150_intent.calibration.json
$DF eval workflows/clinc150_intent.yaml --data "$DATA/clinc150/dev.csv" --rows 425: --no-heads \
  --calibration $TMP/clinc150_intent.calibration.json --out $TMP/abstention-clinc150
$DF eval workflows/sentiment.yaml --data "$DATA/sst2/dev.csv" --limit 40 --raw --baseline json --out $TMP/json-sst2
$DF eval workflows/banking77_intent.yaml --data "$DATA/banking77/dev.csv" --limit 40 --raw --no-heads --baseline json --out $TMP/json-banking77
$DF eval workflows/issue_triage.yaml --data "$DATA/nlbse24_issues/dev.csv" --field label --limit 12 --raw --baseline json --out $TMP/json-issues
$DF eval workflows/clinc150_intent.yaml --data "$DATA/clinc150/dev.csv" --rows 425: --limit 20 --raw --no-heads --baseline json --out $TMP/json-clinc150
parts=(sentiment_calibration=$TMP/sentiment.calibration.json clinc150_calibration=$TMP/clinc150_intent.calibration.json)
for run in raw-sst2 raw-banking77 raw-issues calibration-sst2-raw calibration-sst2-calibrated abstention-clinc150 \
           json-sst2 json-banking77 json-issues json-clinc150; do
  parts+=("$run=$TMP/$run/eval.json")
done
.venv/bin/python -m benchmarks.common merge $HERE/results.json "${parts[@]}"
