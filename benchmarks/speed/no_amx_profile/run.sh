#!/usr/bin/env bash
# What bounds a warm 28-field request with and without AMX (torch's profiler by operator, bfloat16 and
# float32), and the trial of packing bfloat16 weights for oneDNN without AMX: docs/benchmarks.md,
# "llama.cpp, and a processor without AMX". Run on an idle machine with AMX (the cap is checked in
# ../llama_cpp/onednn-kernels-*.txt); writes the profiles beside this file.
set -euo pipefail
cd "$(dirname "$0")/../../.."
HERE=benchmarks/speed/no_amx_profile
for isa in default AVX512_CORE_BF16; do
  if [ $isa = default ]; then unset ONEDNN_MAX_CPU_ISA; else export ONEDNN_MAX_CPU_ISA=$isa; fi
  for dtype in bfloat16 float32; do
    .venv/bin/python $HERE/profile_pass.py $dtype > $HERE/$isa-$dtype.txt
  done
done
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 .venv/bin/python $HERE/pack_bfloat16.py
