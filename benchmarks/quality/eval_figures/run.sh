#!/usr/bin/env bash
# The eval and calibrate figures of docs/evaluation.md, "decisionflow on its own", "Temperature calibration",
# "Abstention on out-of-scope requests" and "decisionflow vs unconstrained JSON generation": the model's own
# readout (no fitted head), under the engine's defaults and the shipped rubrics. Run from anywhere; the
# labelled sets are read from ${DATA:-../shared/data} (beside the checkout). The JSON-generation runs (one
# thread each) report wall times, which need an otherwise idle machine.
# Writes this folder's results.json ({run: that run's eval.json or calibration file}).
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/quality/eval_figures
DATA=${DATA:-../shared/data}
DF=.venv/bin/decisionflow
TMP=$(mktemp -d)
$DF eval workflows/sentiment.yaml --data $DATA/sst2/dev.csv --limit 200 --shuffle-options 2 --raw --no-heads --out $TMP/own-sst2 > /dev/null
$DF eval workflows/banking77_intent.yaml --data $DATA/banking77/dev.csv --limit 200 --raw --no-heads --out $TMP/own-banking77 > /dev/null
$DF eval workflows/issue_triage.yaml --data $DATA/nlbse24_issues/dev.csv --field label --limit 150 --raw --no-heads --out $TMP/own-issues > /dev/null
$DF calibrate workflows/clinc150_intent.yaml --data $DATA/clinc150/dev.csv --rows 0:425 --fit-min-mass --no-heads \
  --output $TMP/clinc150.calibration.json | tee $TMP/clinc150-calibrate.txt
$DF eval workflows/clinc150_intent.yaml --data $DATA/clinc150/dev.csv --rows 425: --no-heads \
  --calibration $TMP/clinc150.calibration.json --out $TMP/own-clinc150 > /dev/null
$DF calibrate workflows/sentiment.yaml --data $DATA/sst2/dev.csv --rows 0:100 --output $TMP/sentiment.calibration.json \
  | tee $TMP/sst2-calibrate.txt
$DF eval workflows/sentiment.yaml --data $DATA/sst2/dev.csv --rows 100: --out $TMP/sst2-held-out > /dev/null
$DF eval workflows/sentiment.yaml --data $DATA/sst2/dev.csv --rows 100: --calibration $TMP/sentiment.calibration.json \
  --min-probability 0.7 --out $TMP/sst2-held-out-calibrated > /dev/null
$DF eval workflows/sentiment.yaml --data $DATA/sst2/dev.csv --limit 40 --raw --baseline json --threads 1 --out $TMP/json-sst2 > /dev/null
$DF eval workflows/banking77_intent.yaml --data $DATA/banking77/dev.csv --limit 40 --raw --no-heads --baseline json --threads 1 --out $TMP/json-banking77 > /dev/null
$DF eval workflows/issue_triage.yaml --data $DATA/nlbse24_issues/dev.csv --field label --limit 12 --raw --baseline json --threads 1 --out $TMP/json-issues > /dev/null
$DF eval workflows/clinc150_intent.yaml --data $DATA/clinc150/dev.csv --rows 425: --limit 20 --raw --no-heads --baseline json --threads 1 --out $TMP/json-clinc150 > /dev/null
.venv/bin/python -m benchmarks.common merge $HERE/results.json \
  own_sst2=$TMP/own-sst2/eval.json own_banking77=$TMP/own-banking77/eval.json own_issues=$TMP/own-issues/eval.json \
  clinc150_calibration=$TMP/clinc150.calibration.json own_clinc150=$TMP/own-clinc150/eval.json \
  sst2_calibration=$TMP/sentiment.calibration.json sst2_held_out=$TMP/sst2-held-out/eval.json \
  sst2_held_out_calibrated=$TMP/sst2-held-out-calibrated/eval.json \
  json_sst2=$TMP/json-sst2/eval.json json_banking77=$TMP/json-banking77/eval.json \
  json_issues=$TMP/json-issues/eval.json json_clinc150=$TMP/json-clinc150/eval.json
cp $TMP/clinc150-calibrate.txt $TMP/sst2-calibrate.txt $HERE/
