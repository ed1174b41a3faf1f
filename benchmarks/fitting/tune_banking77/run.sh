#!/usr/bin/env bash
# LoRA adapters tuned on BANKING77 under the defaults (kept whatever the held-out choice says, so that dev.csv can be
# scored with them), on a seeded stratified selection of PER_INTENT rows per intent of train.csv (select_rows.py),
# then dev.csv scored zero-shot (no heads, no adapter), with the adapter (no heads: the shipped heads were fitted
# without it) and with the shipped frozen heads, and the adapter paired against each: docs/tuning.md, "BANKING77".
# The adapter goes to a scratch folder; the reports and the per-row answers are copied here.
#   PER_INTENT=10 (or 20)  OUT=folder for the raw (default per-intent-N beside this script)
#   THREADS=1 (one intra-op thread: on a machine that other work loads, two threads stall each other; docs/tuning.md;
#   THREADS= leaves torch its own choice, as the defaults do)  NICE="nice -n 19" (yield the CPU to other work; NICE= none)
set -euo pipefail
cd "$(dirname "$0")/../../.."
N=${PER_INTENT:-10}
HERE=benchmarks/fitting/tune_banking77
OUT=${OUT:-$HERE/per-intent-$N}
DATA=${DATA:-../shared/data}/banking77
DF=.venv/bin/decisionflow
NICE=${NICE-nice -n 19}
THREADS=${THREADS-1}
THREAD_ARGS=${THREADS:+--threads $THREADS}
S=/tmp/tune_banking77; mkdir -p $S $OUT
.venv/bin/python -m benchmarks.fitting.tune_banking77.select_rows $DATA/train.csv $S/train$N.jsonl --per-intent $N --seed 0
uptime > $OUT/uptime-before.txt
$NICE /usr/bin/time -f "%e s wall, %M KB peak" $DF tune workflows/banking77_intent.yaml --data $S/train$N.jsonl \
  --label intent=label --keep --no-heads $THREAD_ARGS --output $S/b77-$N.adapter.safetensors --json > $OUT/tune.json 2> $S/tune$N.err
tail -1 $S/tune$N.err | tee $OUT/time.txt
uptime >> $OUT/uptime-before.txt
EVAL="$DF eval workflows/banking77_intent.yaml --data $DATA/dev.csv --label-column label $THREAD_ARGS"
$NICE $EVAL --no-heads --no-adapter --out $S/eval-base-$N > $OUT/eval-base.json
$NICE $EVAL --no-heads --adapter $S/b77-$N.adapter.safetensors --out $S/eval-adapter-$N > $OUT/eval-adapter.json
$NICE $EVAL --no-adapter --out $S/eval-heads-$N > $OUT/eval-heads.json
for kind in base adapter heads; do cp $S/eval-$kind-$N/rows.jsonl $OUT/rows-$kind.jsonl; done
uptime > $OUT/uptime-after.txt
.venv/bin/python -m benchmarks.common stamp $OUT/tune.json $OUT/eval-base.json $OUT/eval-adapter.json $OUT/eval-heads.json
.venv/bin/python -m benchmarks.paired_rows $OUT/rows-base.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-base-adapter.json
.venv/bin/python -m benchmarks.paired_rows $OUT/rows-heads.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-heads-adapter.json
.venv/bin/python -m benchmarks.common stamp $OUT/paired-base-adapter.json $OUT/paired-heads-adapter.json
