#!/usr/bin/env bash
# What else a fused head could read or be (more layers, input means, neighbours, a discriminant, a perceptron,
# the n-gram head's strength), against the shipped fusion: docs/fitting.md, "What else was tried for the
# targets". Run from anywhere; the labelled sets are read from ../shared/data (beside the checkout). Features
# and each member's scores are cached under $CACHE (on two cores beside other runs, the reads took about an
# hour and the members half an hour; from the cache, the fusions take seconds). Writes this folder's results.
set -euo pipefail
cd "$(dirname "$0")/../../.."
CACHE=${CACHE:-/tmp/decisionflow-heads-members}
.venv/bin/python -m benchmarks.fitting.heads_members.measure --sets sst2,banking77,clinc150 --cache "$CACHE" \
  --out benchmarks/fitting/heads_members/results.json
