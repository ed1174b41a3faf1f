#!/usr/bin/env bash
# SST-2: an adapter tuned on train.csv with other settings than the defaults (kept, so that dev.csv can be scored
# with it), dev.csv scored with it and paired against the defaults' adapter (rows-adapter.jsonl beside this script)
# and against heads fitted on train.csv without an adapter: docs/tuning.md, "SST-2: other settings".
#   NAME=heads bash benchmarks/fitting/tune_sst2/variants.sh          # the heads (fit, no adapter) first
#   NAME=lr2e3_e1_all TUNE_ARGS="--learning-rate 2e-3 --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" ...
#   NAME=lr2e3_e2_all TUNE_ARGS="--learning-rate 2e-3 --epochs 2 --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" ...
# One thread, nice 19; the adapter goes to a scratch folder, the reports and the per-row answers under variants/NAME.
set -euo pipefail
cd "$(dirname "$0")/../../.."
NAME=${NAME:?name the variant}
HERE=benchmarks/fitting/tune_sst2
OUT=$HERE/variants/$NAME
DATA=${DATA:-../shared/data}/sst2
DF=.venv/bin/decisionflow
NICE=${NICE:-nice -n 19}
S=/tmp/tune_sst2_variants/$NAME; mkdir -p $S $OUT
EVAL="$DF eval workflows/sentiment.yaml --data $DATA/dev.csv --label-column label --threads 1"
if [ "$NAME" = heads ]; then
  $NICE $DF fit workflows/sentiment.yaml --data $DATA/train.csv --label sentiment=label --threads 1 --no-adapter \
    --output $S/h.heads.safetensors --json > $OUT/fit.json
  $NICE $EVAL --heads $S/h.heads.safetensors --no-adapter --out $S/eval-heads > $OUT/eval-heads.json
  cp $S/eval-heads/rows.jsonl $OUT/rows-heads.jsonl
  .venv/bin/python -m benchmarks.common stamp $OUT/fit.json $OUT/eval-heads.json
  exit 0
fi
# shellcheck disable=SC2086
$NICE $DF tune workflows/sentiment.yaml --data $DATA/train.csv --label sentiment=label --keep --threads 1 \
  --output $S/a.adapter.safetensors --json $TUNE_ARGS > $OUT/tune.json
$NICE $EVAL --adapter $S/a.adapter.safetensors --out $S/eval-adapter > $OUT/eval-adapter.json
cp $S/eval-adapter/rows.jsonl $OUT/rows-adapter.jsonl
.venv/bin/python -m benchmarks.paired_rows $HERE/rows-adapter.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-defaults.json
if [ -f $HERE/variants/heads/rows-heads.jsonl ]; then
  .venv/bin/python -m benchmarks.paired_rows $HERE/variants/heads/rows-heads.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-heads.json
fi
.venv/bin/python -m benchmarks.common stamp $OUT/*.json
