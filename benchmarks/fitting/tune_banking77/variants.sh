#!/usr/bin/env bash
# BANKING77 at 10 rows per intent (select_rows.py, seed 0): an adapter tuned with other settings than the defaults,
# dev.csv scored with it alone and with heads fitted on the adapted model (`fit` merges the adapter), beside heads
# fitted on the same rows without an adapter: docs/tuning.md, "BANKING77: other settings, and heads on the adapted model".
#   NAME=lr2e3_e2_qv TUNE_ARGS="--learning-rate 2e-3 --epochs 2" bash benchmarks/fitting/tune_banking77/variants.sh
#   NAME=lr2e3_e2_all TUNE_ARGS="--learning-rate 2e-3 --epochs 2 --targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj" ...
#   NAME=base bash benchmarks/fitting/tune_banking77/variants.sh      # heads without an adapter only
# One thread, nice 19 (as run.sh); the adapter and heads go to a scratch folder, the reports and per-row answers here.
set -euo pipefail
cd "$(dirname "$0")/../../.."
NAME=${NAME:?name the variant}
HERE=benchmarks/fitting/tune_banking77
OUT=$HERE/variants/$NAME
DATA=${DATA:-../shared/data}/banking77
DF=.venv/bin/decisionflow
NICE=${NICE:-nice -n 19}
S=/tmp/tune_banking77_variants/$NAME; mkdir -p $S $OUT
.venv/bin/python -m benchmarks.fitting.tune_banking77.select_rows $DATA/train.csv $S/train.jsonl --per-intent 10 --seed 0
EVAL="$DF eval workflows/banking77_intent.yaml --data $DATA/dev.csv --label-column label --threads 1"
if [ "$NAME" = base ]; then
  $NICE $DF fit workflows/banking77_intent.yaml --data $S/train.jsonl --label intent=label --threads 1 --no-adapter \
    --output $S/h.heads.safetensors --json > $OUT/fit.json
  $NICE $EVAL --heads $S/h.heads.safetensors --no-adapter --out $S/eval-heads > $OUT/eval-heads.json
  cp $S/eval-heads/rows.jsonl $OUT/rows-heads.jsonl
  .venv/bin/python -m benchmarks.common stamp $OUT/fit.json $OUT/eval-heads.json
  exit 0
fi
# shellcheck disable=SC2086
$NICE $DF tune workflows/banking77_intent.yaml --data $S/train.jsonl --label intent=label --keep --threads 1 \
  --no-heads --output $S/a.adapter.safetensors --json $TUNE_ARGS > $OUT/tune.json
$NICE $EVAL --no-heads --adapter $S/a.adapter.safetensors --out $S/eval-adapter > $OUT/eval-adapter.json
$NICE $DF fit workflows/banking77_intent.yaml --data $S/train.jsonl --label intent=label --threads 1 \
  --adapter $S/a.adapter.safetensors --output $S/h.heads.safetensors --json > $OUT/fit.json
$NICE $EVAL --heads $S/h.heads.safetensors --adapter $S/a.adapter.safetensors --out $S/eval-both > $OUT/eval-both.json
cp $S/eval-adapter/rows.jsonl $OUT/rows-adapter.jsonl
cp $S/eval-both/rows.jsonl $OUT/rows-both.jsonl
.venv/bin/python -m benchmarks.common stamp $OUT/tune.json $OUT/eval-adapter.json $OUT/fit.json $OUT/eval-both.json
if [ -f $HERE/variants/base/rows-heads.jsonl ]; then
  .venv/bin/python -m benchmarks.paired_rows $HERE/variants/base/rows-heads.jsonl $OUT/rows-both.jsonl > $OUT/paired-base-heads-both.json
fi
if [ -f $HERE/per-intent-10/rows-adapter.jsonl ]; then  # the defaults' adapter at 10 per intent (run.sh)
  .venv/bin/python -m benchmarks.paired_rows $HERE/per-intent-10/rows-adapter.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-defaults.json
  .venv/bin/python -m benchmarks.common stamp $OUT/paired-defaults.json
fi
