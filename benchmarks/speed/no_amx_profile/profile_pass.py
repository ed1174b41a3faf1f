"""Where a warm 28-field request's time goes (torch's profiler, operators by self CPU time): the
support_triage preset, decisionflow's defaults in the format given, 5 requests after 2 warm ones.

usage: python profile_pass.py {bfloat16|float32} > out.txt   (ONEDNN_MAX_CPU_ISA as the caller sets it)
"""

import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from decisionflow.bench.presets import default_data_dir
from decisionflow.bench.workloads import build_workloads
from decisionflow.runtime.engine import Engine

dtype = sys.argv[1]
engine = Engine.load(dtype=dtype)
workload = next(w for w in build_workloads(default_data_dir()) if w.name == "support_triage")
for _ in range(2):
    engine.decide(workload.rubric, workload.payload)
with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        engine.decide(workload.rubric, workload.payload)
events = prof.key_averages()
total = sum(e.self_cpu_time_total for e in events)
print(f"dtype {dtype}, ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '(unset)')}, "
      f"threads {torch.get_num_threads()}, 5 requests, self CPU {total / 1e3 / 5:.0f} ms a request")
for event in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]:
    share = event.self_cpu_time_total / total
    print(f"{share:6.1%}  {event.self_cpu_time_total / 1e3 / 5:8.1f} ms  {event.count // 5:6d} calls  {event.key}")
