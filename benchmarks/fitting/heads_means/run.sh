#!/usr/bin/env bash
# Heads fitted with and without the input-mean member on train.csv of SST-2, BANKING77, CLINC150 and NLBSE'24,
# scored on dev.csv by `decisionflow eval`, paired row by row: docs/fitting.md, "The input's mean as a fourth
# member". Engine defaults; rubrics copied to /tmp/heads_means so the shipped heads stay as they are.
set -u
cd "$(dirname "$0")/../../.."
.venv/bin/python -m benchmarks.fitting.heads_means.measure --sets "${SETS:-sst2,banking77,clinc150,nlbse24_issues}" \
  --out benchmarks/fitting/heads_means/results.json
# Timings (an otherwise idle machine): a request with either heads file, and the fit's read with and without means.
.venv/bin/python -m benchmarks.fitting.heads_means.measure --overhead banking77 --read-cost banking77 \
  --out benchmarks/fitting/heads_means/results.json
