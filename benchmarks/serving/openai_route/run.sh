#!/usr/bin/env bash
# The OpenAI-compatible route against grammar-constrained generation and the engine in process: docs/benchmarks.md, "OpenAI structured outputs".
# Run from anywhere on an otherwise idle machine; writes this folder's results file(s): `decisionflow
# bench`'s bench.json for each run.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/serving/openai_route
TMP=$(mktemp -d)
.venv/bin/decisionflow bench --workloads openai_support_triage,openai_fintech_fraud,openai_code_security \
  --methods decisionflow,openai_route,grammar_constrained --repeats 5 --slow-repeats 2 --out $TMP/run
cp $TMP/run/bench.json $HERE/results.json
