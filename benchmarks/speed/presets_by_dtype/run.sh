#!/usr/bin/env bash
# The five presets against pcd-rlcd in float32 and bfloat16, and under the default dtype: docs/benchmarks.md, "Results of 2026-12-02".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/presets_by_dtype
TMP=$(mktemp -d)
for dtype in float32 bfloat16; do
  .venv/bin/decisionflow bench --repeats 5 --slow-repeats 1 --methods decisionflow,decisionflow_no_pin,pcd_rlcd \
    --workloads support_triage,fintech_fraud,code_security,high_cardinality_255,model_routing_route --dtype $dtype --out $TMP/$dtype
  cp $TMP/$dtype/bench.json $HERE/$dtype.json
done
.venv/bin/decisionflow bench --repeats 5 --slow-repeats 1 --methods decisionflow,decisionflow_no_pin,pcd_rlcd \
  --workloads support_triage,fintech_fraud,code_security,high_cardinality_255,model_routing_route --out $TMP/default
cp $TMP/default/bench.json $HERE/default-bfloat16.json
