#!/usr/bin/env bash
# decisionflow beside pcd-rlcd and llama.cpp (llama-cpp-python, built from source: pip install
# 'decisionflow[llamacpp]') on the five preset workloads, on this processor as it is and with oneDNN held
# to AVX512-BF16 without AMX (ONEDNN_MAX_CPU_ISA), after checking that the setting takes (oneDNN's own
# log names the kernels it picks). Then a cold CLI run of the 32-field rubric, 3 times each way.
set -u
cd "$(dirname "$0")/../../.."
DF=.venv/bin/decisionflow
OUT=benchmarks/speed/llama_cpp
WORK=model_routing_route,support_triage,fintech_fraud,code_security,high_cardinality_255
TICKET="Subject: charged twice for my March invoice. I was billed twice (\$49 each). Please refund the duplicate charge within 12 hours or I will cancel. -- Dana"
grep -o -w -E 'avx512_bf16|avx512_vnni|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ' > $OUT/cpu-flags.txt
grep -m1 'model name' /proc/cpuinfo >> $OUT/cpu-flags.txt
for isa in default AVX512_CORE_BF16; do
  if [ $isa = default ]; then unset ONEDNN_MAX_CPU_ISA; else export ONEDNN_MAX_CPU_ISA=$isa; fi
  # Which kernels oneDNN runs the engine's matrix products with (amx or not).
  ONEDNN_VERBOSE=1 $DF run workflows/sentiment.yaml --text "a gorgeous, witty film" 2>/dev/null \
    | grep -E '^onednn_verbose,.*(isa|exec)' | grep -o -E 'isa:.*|brg[^,]*|jit:[^,]*|gemm:[^,]*' | sort | uniq -c > $OUT/onednn-kernels-$isa.txt
  $DF bench --methods decisionflow,pcd_rlcd,llama_cpp --workloads $WORK --repeats 5 --slow-repeats 3 \
    --out $OUT/bench-$isa > $OUT/bench-$isa.log 2>&1
  for i in 1 2 3; do
    /usr/bin/time -f "%e" $DF run workflows/support_triage.yaml --text "$TICKET" > /dev/null 2>> $OUT/cold-$isa.txt
  done
done
unset ONEDNN_MAX_CPU_ISA
