#!/usr/bin/env bash
# A LoRA adapter tuned on every NLBSE'24 train.csv issue for both fields of workflows/issue_triage.yaml at once
# (`label` and `repo`: one adapter for the rubric) under the defaults and a 256-token input budget (the rubric's
# max_input_tokens, as benchmarks/fitting/input_budget reads it), kept whatever the held-out choice says, then
# dev.csv's `label` scored zero-shot and with the adapter: docs/tuning.md, "NLBSE'24". One thread, nice 19.
# The adapter goes to a scratch folder; the reports and the per-row answers are copied here.
#   BUDGET=256 (tokens of each issue read)  TUNE_ARGS="" (extra tune options)  OUT=folder for the raw (default
#   budget-N beside this script)  THREADS=1 (THREADS= leaves torch its own choice, as the defaults do)  NICE= (no nice)
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/tune_nlbse
B=${BUDGET:-256}
OUT=${OUT:-$HERE/budget-$B}
DATA=${DATA:-../shared/data}/nlbse24_issues
DF=.venv/bin/decisionflow
NICE=${NICE-nice -n 19}
THREADS=${THREADS-1}
THREAD_ARGS=${THREADS:+--threads $THREADS}
S=/tmp/tune_nlbse; mkdir -p $S $OUT
cp workflows/issue_triage.yaml $S/issue_triage.yaml
echo "max_input_tokens: $B" >> $S/issue_triage.yaml
uptime > $OUT/uptime.txt
# shellcheck disable=SC2086
$NICE /usr/bin/time -f "%e s wall, %M KB peak" $DF tune $S/issue_triage.yaml --data $DATA/train.csv --keep $THREAD_ARGS \
  --output $S/issue_triage.adapter.safetensors --json ${TUNE_ARGS:-} > $OUT/tune.json 2> $S/tune.err
tail -1 $S/tune.err | tee $OUT/time.txt
uptime >> $OUT/uptime.txt
EVAL="$DF eval $S/issue_triage.yaml --data $DATA/dev.csv --field label --label-column label $THREAD_ARGS"
$NICE $EVAL --no-adapter --out $S/eval-base > $OUT/eval-base.json
$NICE $EVAL --adapter $S/issue_triage.adapter.safetensors --out $S/eval-adapter > $OUT/eval-adapter.json
for kind in base adapter; do cp $S/eval-$kind/rows.jsonl $OUT/rows-$kind.jsonl; done
.venv/bin/python -m benchmarks.paired_rows $OUT/rows-base.jsonl $OUT/rows-adapter.jsonl > $OUT/paired-base-adapter.json
.venv/bin/python -m benchmarks.common stamp $OUT/tune.json $OUT/eval-base.json $OUT/eval-adapter.json $OUT/paired-base-adapter.json
