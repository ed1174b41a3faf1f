#!/usr/bin/env bash
# The shipped heads of the BANKING77 and CLINC150 workflows: fitted on every train.csv row under the
# engine's defaults (bfloat16 on a CPU that multiplies it), saved beside the rubric in workflows/, then
# dev.csv scored in bfloat16 (with the tfidf baseline) and in float32 (what `auto` picks on a CPU
# without bfloat16 instructions) with the same file; benchmarks/paired_rows.py pairs the two runs' rows.
set -u
mkdir -p /tmp/formats
cd "$(dirname "$0")/../../.."
DF=.venv/bin/decisionflow
OUT=benchmarks/fitting/heads_formats
DATA=../shared/data
for spec in "banking77 banking77_intent" "clinc150 clinc150_intent"; do
  set -- $spec; S=$1; W=$2
  EXTRA=""; [ "$S" = clinc150 ] && EXTRA="--skip-unknown-labels"
  /usr/bin/time -f "%e s wall" $DF fit workflows/$W.yaml --data $DATA/$S/train.csv $EXTRA --json > $OUT/$S-fit.json 2> /tmp/$S-fit.err
  tail -1 /tmp/$S-fit.err > $OUT/$S-fit.time
  $DF eval workflows/$W.yaml --data $DATA/$S/dev.csv --baseline tfidf --train $DATA/$S/train.csv \
    --out /tmp/formats/$S-bfloat16 > $OUT/$S-eval-bfloat16.json 2> /tmp/$S-eval-bf16.err
  $DF eval workflows/$W.yaml --data $DATA/$S/dev.csv --dtype float32 \
    --out /tmp/formats/$S-float32 > $OUT/$S-eval-float32.json 2> /tmp/$S-eval-f32.err
  .venv/bin/python -m benchmarks.paired_rows /tmp/formats/$S-bfloat16/rows.jsonl /tmp/formats/$S-float32/rows.jsonl \
    --skip-gold oos > $OUT/$S-bfloat16-vs-float32.json
  .venv/bin/python -m benchmarks.common stamp $OUT/$S-fit.json $OUT/$S-eval-bfloat16.json
  .venv/bin/python -m benchmarks.common stamp --dtype=float32 $OUT/$S-eval-float32.json
  .venv/bin/python -m benchmarks.common stamp "--dtype=the default against float32" $OUT/$S-bfloat16-vs-float32.json
done
