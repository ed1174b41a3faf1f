#!/usr/bin/env bash
# The readout's correction under a tuned adapter: dev.csv scored with the `lr2e3_e2_all_chosen` variant's adapter
# (variants.sh, epoch 1 of 2 kept) read raw (`--debias none`) and with the full content-free correction, beside the
# rubric's default (half the correction: that variant's rows-adapter.jsonl), paired: docs/tuning.md, "The readout's
# correction under an adapter". One thread; the adapter is the one variants.sh left in its scratch folder.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/fitting/tune_sst2/variants/lr2e3_e2_all_chosen
ADAPTER=${ADAPTER:-/tmp/tune_sst2_variants/lr2e3_e2_all_chosen/a.adapter.safetensors}
DATA=${DATA:-../shared/data}/sst2
for d in none content_free; do
  .venv/bin/decisionflow eval workflows/sentiment.yaml --data $DATA/dev.csv --label-column label --threads 1 \
    --adapter $ADAPTER --debias $d --out /tmp/sst2_debias_$d > $HERE/eval-adapter-debias-$d.json
  cp /tmp/sst2_debias_$d/rows.jsonl $HERE/rows-adapter-debias-$d.jsonl
  .venv/bin/python -m benchmarks.paired_rows $HERE/rows-adapter.jsonl $HERE/rows-adapter-debias-$d.jsonl \
    > $HERE/paired-debias-$d.json
done
.venv/bin/python -m benchmarks.common stamp $HERE/eval-adapter-debias-*.json $HERE/paired-debias-*.json
