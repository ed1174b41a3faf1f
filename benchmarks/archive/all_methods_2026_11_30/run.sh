#!/usr/bin/env bash
# Every method on every preset (generation, grammar, per-field, copied prefix, pcd-rlcd): docs/benchmarks.md, "Earlier results (2026-11-30)".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/archive/all_methods_2026_11_30
TMP=$(mktemp -d)
.venv/bin/decisionflow bench --repeats 5 --slow-repeats 1 --out $TMP/run
cp $TMP/run/bench.json $HERE/results.json
