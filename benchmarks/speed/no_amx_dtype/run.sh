#!/usr/bin/env bash
# decisionflow in bfloat16 and in float32, on this processor as it is (AMX) and with oneDNN held to
# AVX512-BF16 (ONEDNN_MAX_CPU_ISA; checked in ../llama_cpp/onednn-kernels-*.txt): which
# number format is faster where bfloat16 is multiplied without AMX. The same five workloads as there.
set -u
cd "$(dirname "$0")/../../.."
DF=.venv/bin/decisionflow
OUT=benchmarks/speed/no_amx_dtype
WORK=model_routing_route,support_triage,fintech_fraud,code_security,high_cardinality_255
for isa in default AVX512_CORE_BF16; do
  if [ $isa = default ]; then unset ONEDNN_MAX_CPU_ISA; else export ONEDNN_MAX_CPU_ISA=$isa; fi
  for dtype in bfloat16 float32; do
    $DF bench --methods decisionflow --dtype $dtype --workloads $WORK --repeats 7 --out $OUT/$isa-$dtype > $OUT/$isa-$dtype.log 2>&1
  done
done
