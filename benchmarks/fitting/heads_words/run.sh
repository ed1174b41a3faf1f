#!/usr/bin/env bash
# Fit heads (with words, and on the hidden states alone) on train.csv of SST-2, BANKING77 and CLINC150, score
# dev.csv with the tfidf baseline beside: docs/fitting.md, "Heads that read the words". Each set's rubric is
# copied to a scratch folder so the shipped heads stay as they are; reports are copied here.
set -u
cd "$(dirname "$0")/../../.."
OUT=benchmarks/fitting/heads_words
DF=.venv/bin/decisionflow
for spec in "sst2 sentiment" "banking77 banking77_intent" "clinc150 clinc150_intent"; do
  set -- $spec; S=$1; W=$2
  D=/tmp/m/$S; mkdir -p $D; cp workflows/$W.yaml $D/$W.yaml
  EXTRA=""; [ "$S" = clinc150 ] && EXTRA="--skip-unknown-labels"
  /usr/bin/time -f "%e s wall" $DF fit $D/$W.yaml --data ../shared/data/$S/train.csv $EXTRA --json > $D/fit.json 2> $D/fit.err
  /usr/bin/time -f "%e s wall" $DF fit $D/$W.yaml --data ../shared/data/$S/train.csv $EXTRA --no-words --output $D/hidden.heads.safetensors --json > $D/fit-hidden.json 2> $D/fit-hidden.err
  $DF eval $D/$W.yaml --data ../shared/data/$S/dev.csv --baseline tfidf --train ../shared/data/$S/train.csv --out $D/eval > $D/eval.json 2> $D/eval.err
  $DF eval $D/$W.yaml --data ../shared/data/$S/dev.csv --heads $D/hidden.heads.safetensors --out $D/eval-hidden > $D/eval-hidden.json 2> $D/eval-hidden.err
  cp $D/fit.json $OUT/$S-fit.json; cp $D/fit-hidden.json $OUT/$S-fit-hidden.json
  cp $D/eval.json $OUT/$S-eval.json; cp $D/eval-hidden.json $OUT/$S-eval-hidden.json
  .venv/bin/python -m benchmarks.common stamp $OUT/$S-fit.json $OUT/$S-fit-hidden.json $OUT/$S-eval.json $OUT/$S-eval-hidden.json
done
