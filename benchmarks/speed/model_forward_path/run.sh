#!/usr/bin/env bash
# The model's own forward against the engine's decoder path, float32 and bfloat16: docs/benchmarks.md, "The price of generality".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/model_forward_path
TMP=$(mktemp -d)
for dtype in float32 bfloat16; do
  .venv/bin/decisionflow bench --workloads support_triage,fintech_fraud,code_security,high_cardinality_255,model_routing_route \
    --methods decisionflow,decisionflow_generic --repeats 7 --dtype $dtype --out $TMP/$dtype
  cp $TMP/$dtype/bench.json $HERE/$dtype.json
done
