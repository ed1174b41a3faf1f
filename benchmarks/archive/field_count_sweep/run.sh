#!/usr/bin/env bash
# Latency against the number of fields, every method: docs/benchmarks.md, "Field-count sweep and the one-field case".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/archive/field_count_sweep
TMP=$(mktemp -d)
.venv/bin/decisionflow bench --repeats 3 --slow-repeats 1 --out $TMP/run \
  --workloads model_routing_route,support_triage_first_1,support_triage_first_4,support_triage_first_8,support_triage_first_16,support_triage \
  --methods decisionflow,decisionflow_no_pin,json_generate,grammar_constrained,copied_prefix,pcd_rlcd
cp $TMP/run/bench.json $HERE/results.json
cp $TMP/run/latency_by_method.png $TMP/run/latency_vs_fields.png $HERE/
