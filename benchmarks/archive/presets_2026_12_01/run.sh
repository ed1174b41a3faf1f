#!/usr/bin/env bash
# The five presets against pcd-rlcd with the defaults of 2026-12-01 (AMD EPYC, float32): docs/benchmarks.md, "Results with the defaults of 2026-12-01".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/archive/presets_2026_12_01
TMP=$(mktemp -d)
.venv/bin/decisionflow bench --repeats 5 --slow-repeats 1 --methods decisionflow,decisionflow_no_pin,pcd_rlcd \
  --workloads support_triage,fintech_fraud,code_security,high_cardinality_255,model_routing_route --out $TMP/run
cp $TMP/run/bench.json $HERE/results.json
