#!/usr/bin/env bash
# Trial, not kept: the decoder's projections as int8 products on a processor without AMX (oneDNN held to
# AVX512-BF16), speed and answers on the five presets for each variant, then the per-token variant's
# answers against bfloat16 on the development sets: docs/benchmarks.md, "llama.cpp, and a processor
# without AMX". Run from anywhere on an otherwise idle machine; writes results.json.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/int8_projections
TMP=$(mktemp -d)
for variant in per_tensor per_token per_token_no_down; do
  ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 .venv/bin/python -m benchmarks.speed.int8_projections.measure --variant $variant \
    --part presets --out $TMP/presets-$variant.json
done
.venv/bin/python -m benchmarks.speed.int8_projections.measure --variant per_token --part dev --out $TMP/dev-per_token.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json presets_per_tensor=$TMP/presets-per_tensor.json \
  presets_per_token=$TMP/presets-per_token.json presets_per_token_no_down=$TMP/presets-per_token_no_down.json \
  dev_per_token=$TMP/dev-per_token.json
