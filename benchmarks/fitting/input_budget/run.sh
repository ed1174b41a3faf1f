#!/usr/bin/env bash
# NLBSE'24 issues: fit heads on train.csv with the model reading each input whole or cut to a token
# budget (the rubric's max_input_tokens), then score dev.csv (tfidf baseline beside), keeping each
# row's answer (eval-<budget>/rows.jsonl) for a paired test between budgets. Engine defaults.
# Usage: run.sh [budget ...]   (default: full 512 256 128)
set -u
cd "$(dirname "$0")/../../.."
DF=.venv/bin/decisionflow
OUT=benchmarks/fitting/input_budget
DATA=../shared/data/nlbse24_issues
for budget in "${@:-full 512 256 128}"; do
 for b in $budget; do
  D=/tmp/budget/$b; mkdir -p $D
  cp workflows/issue_triage.yaml $D/issue_triage.yaml
  [ "$b" = full ] || echo "max_input_tokens: $b" >> $D/issue_triage.yaml
  /usr/bin/time -f "%e s wall" $DF fit $D/issue_triage.yaml --data $DATA/train.csv --json > $OUT/fit-$b.json 2> $D/fit.err
  tail -1 $D/fit.err > $OUT/fit-$b.time
  $DF eval $D/issue_triage.yaml --data $DATA/dev.csv --field label --baseline tfidf \
    --train $DATA/train.csv --out $OUT/eval-$b > $OUT/eval-$b.json 2> $D/eval.err
  .venv/bin/python -m benchmarks.common stamp $OUT/fit-$b.json $OUT/eval-$b.json
  echo "$b done $(date)" >> /tmp/budget/progress.txt
 done
done
