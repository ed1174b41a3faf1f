#!/usr/bin/env bash
# A LoRA adapter tuned on SST-2's train.csv under the defaults (kept whatever the held-out choice says, so that
# dev.csv can be scored with it), then dev.csv scored without and with it: docs/tuning.md, "SST-2, the first full
# run". The adapter goes to a scratch folder; the reports and the per-row answers are copied here.
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=benchmarks/fitting/tune_sst2
DATA=${DATA:-../shared/data}/sst2
DF=.venv/bin/decisionflow
S=/tmp/tune_sst2; mkdir -p $S
/usr/bin/time -f "%e s wall, %M KB peak" $DF tune workflows/sentiment.yaml --data $DATA/train.csv --label sentiment=label \
  --keep --output $S/sst2.adapter.safetensors --json > $OUT/tune.json 2> $S/tune.err
tail -1 $S/tune.err
$DF eval workflows/sentiment.yaml --data $DATA/dev.csv --label-column label --no-adapter --out $S/eval-base > $OUT/eval-base.json
$DF eval workflows/sentiment.yaml --data $DATA/dev.csv --label-column label --adapter $S/sst2.adapter.safetensors \
  --out $S/eval-adapter > $OUT/eval-adapter.json
cp $S/eval-base/rows.jsonl $OUT/rows-base.jsonl; cp $S/eval-adapter/rows.jsonl $OUT/rows-adapter.jsonl
.venv/bin/python -m benchmarks.common stamp $OUT/tune.json $OUT/eval-base.json $OUT/eval-adapter.json
.venv/bin/python -m benchmarks.paired_rows $OUT/rows-base.jsonl $OUT/rows-adapter.jsonl > $OUT/paired.json
.venv/bin/python -m benchmarks.common stamp $OUT/paired.json
