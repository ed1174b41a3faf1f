#!/usr/bin/env bash
# One decoder layer's projections in each number format, on this processor as it is and with oneDNN held
# to AVX512-BF16 without AMX (ONEDNN_MAX_CPU_ISA; int8 dynamic runs in fbgemm, which the cap does not
# touch): docs/benchmarks.md, "Results with the defaults of 2026-12-01" (int8) and "llama.cpp, and a
# processor without AMX". Run from anywhere on an otherwise idle machine; writes results.json.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/number_formats
TMP=$(mktemp -d)
.venv/bin/python -m benchmarks.speed.number_formats.measure --tokens 400 --repeats 50 --out $TMP/default.json
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 .venv/bin/python -m benchmarks.speed.number_formats.measure --tokens 400 --repeats 50 \
  --out $TMP/avx512_core_bf16.json
.venv/bin/python -m benchmarks.common merge $HERE/results.json default=$TMP/default.json AVX512_CORE_BF16=$TMP/avx512_core_bf16.json
