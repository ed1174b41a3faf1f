#!/usr/bin/env bash
# What else a fused head could read or be (more layers, input means, neighbours, a discriminant, a perceptron,
# the n-gram head's strength), against the shipped fusion: docs/fitting.md, "What else was tried for the
# targets". Run from anywhere; the labelled sets are read from ../shared/data (beside the checkout). Features
# are cached under $CACHE (the reads: about 40 min on two cores; the fits: about 30). Writes this folder's
# results file.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${CACHE:-/tmp/decisionflow-heads-members}
.venv/bin/python -m benchmarks.heads_members.measure --sets sst2,banking77,clinc150 --cache "$CACHE" \
  --out benchmarks/heads_members/results.json
