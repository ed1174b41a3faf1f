"""Packing the bfloat16 projections for oneDNN (`pack_for_cpu`, which leaves converted weights unpacked):
warm medians of 7 requests before and after, answers and probabilities compared. Run as is and under
ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16.

usage: python pack_bfloat16.py
"""

import statistics
import time

from decisionflow.bench.presets import default_data_dir
from decisionflow.bench.workloads import build_workloads
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.passes.decoder import is_packed, pack_for_cpu

WORKLOADS = ("support_triage", "high_cardinality_255", "model_routing_route")

engine = Engine.load(dtype="bfloat16")
model = engine.loaded.model
workloads = {w.name: w for w in build_workloads(default_data_dir())}


def warm_median(name: str, repeats: int = 7):
    workload = workloads[name]
    for _ in range(2):
        engine.decide(workload.rubric, workload.payload)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        decision = engine.decide(workload.rubric, workload.payload)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times), decision


plain = {name: warm_median(name) for name in WORKLOADS}
print("packed before:", is_packed(model))
model.weights_mapped = True  # lets pack_for_cpu pack the converted weights (held twice from here on)
print("packed now:", pack_for_cpu(model))
for name in WORKLOADS:
    ms, packed = warm_median(name)
    before = plain[name][1]
    gap = max(abs(before.fields[f].probabilities[k] - packed.fields[f].probabilities[k])
              for f in before.fields if before.fields[f].probabilities for k in before.fields[f].probabilities)
    same = all(before.fields[f].value == packed.fields[f].value for f in before.fields)
    print(f"{name}: plain {plain[name][0]:.0f} ms, packed {ms:.0f} ms, same answers {same}, largest probability gap {gap:.2e}")
