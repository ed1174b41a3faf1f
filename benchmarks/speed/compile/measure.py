"""`torch.compile` of the packed pass on the CPU: does it pay for itself? Warm latency before and after,
and what the first compiled request costs.

    .venv/bin/python -m benchmarks.speed.compile.measure --target mlp      # each layer's MLP compiled (dynamic shapes)
    .venv/bin/python -m benchmarks.speed.compile.measure --target layers   # the whole decoder stack of a pass

Three texts of different lengths, each decided twice, on `workflows/support_triage.yaml` (32 fields,
3 rounds), eager then compiled, in one process. The rule for keeping it: it must win warm and must not
slow the first request of a process by more than it saves over ten requests. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, dtype_of, write_results
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.passes import backend, forward
from decisionflow.runtime.passes.ops import TorchOps
from decisionflow.spec import load_rubric

TEXTS = [
    (ROOT / "decisionflow" / "bench" / "data" / "support_ticket.txt").read_text(encoding="utf-8").strip(),
    "My card was charged twice for order 1234, please refund it.",
    "The app crashes on login since the last update.",
]


def timed(engine: Engine, rubric, repeats: int = 2) -> list[float]:
    times = []
    for text in TEXTS * repeats:
        began = time.perf_counter()
        engine.decide(rubric, text)
        times.append((time.perf_counter() - began) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("mlp", "layers"), default="mlp")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rubric = load_rubric(ROOT / "workflows" / "support_triage.yaml")
    engine = Engine.load(persist_prefixes=False, pack_weights=False)  # the plain products the trial compiled
    engine.decide(rubric, TEXTS[1])  # head, prior and first-call warm-up outside the timings
    eager = timed(engine, rubric)
    if args.target == "mlp":
        TorchOps.mlp = staticmethod(torch.compile(lambda module, x: module(x), dynamic=True))
    else:
        backend.run_layers = torch.compile(forward.run_layers, dynamic=True)
    began = time.perf_counter()
    engine.decide(rubric, TEXTS[0])
    first = (time.perf_counter() - began) * 1000
    compiled = timed(engine, rubric)
    report = {
        "target": args.target, "threads": torch.get_num_threads(),
        "eager_ms": [round(t) for t in eager], "compiled_ms": [round(t) for t in compiled],
        "first_compiled_request_ms": round(first),
        "saved_per_request_ms": round((sum(eager) - sum(compiled)) / len(eager)),
        "first_request_extra_ms": round(first - eager[0]),
    }
    print(json.dumps(report))
    write_results(args.out, report, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    main()
