#!/usr/bin/env bash
# Fit heads (with words, and on the hidden states alone) on train.csv, score dev.csv with the tfidf baseline.
set -u
cd /work/main
DF=.venv/bin/decisionflow
for spec in "sst2 sentiment" "banking77 banking77_intent" "clinc150 clinc150_intent"; do
  set -- $spec; S=$1; W=$2
  D=/tmp/m/$S; mkdir -p $D; cp workflows/$W.yaml $D/$W.yaml
  EXTRA=""; [ "$S" = clinc150 ] && EXTRA="--skip-unknown-labels"
  /usr/bin/time -f "%e s wall" $DF fit $D/$W.yaml --data ../shared/data/$S/train.csv $EXTRA --json > $D/fit.json 2> $D/fit.err
  /usr/bin/time -f "%e s wall" $DF fit $D/$W.yaml --data ../shared/data/$S/train.csv $EXTRA --no-words --output $D/hidden.heads.safetensors --json > $D/fit-hidden.json 2> $D/fit-hidden.err
  $DF eval $D/$W.yaml --data ../shared/data/$S/dev.csv --baseline tfidf --train ../shared/data/$S/train.csv --out $D/eval > $D/eval.json 2> $D/eval.err
  $DF eval $D/$W.yaml --data ../shared/data/$S/dev.csv --heads $D/hidden.heads.safetensors --out $D/eval-hidden > $D/eval-hidden.json 2> $D/eval-hidden.err
  echo "$S done" >> /tmp/m/progress.txt
done
