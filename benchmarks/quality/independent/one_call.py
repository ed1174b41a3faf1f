"""Chunks attended with the prefix in one call, against the earlier separate prefix call merged by log-sum-exp.

    .venv/bin/python -m benchmarks.quality.independent.one_call --out benchmarks/quality/independent/one-call.json

The branch attention of commit BEFORE (`git show`, imported beside this checkout's) and this checkout's, swapped
into the engine's backend turn about in one process, ROUNDS times: per 28-question preset, the median warm
request read independently with each, and the shared reading beside them (docs/engine.md, "Independent
questions", the cost).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import dtype_of, write_results
from benchmarks.quality.independent.against_filed import PRESETS, median_ms
from decisionflow.bench.presets import load_preset
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.passes import backend
from decisionflow.spec.rubric import Rubric

BEFORE = "4ffd737"
ROOT = Path(__file__).resolve().parents[3]


def earlier_attention() -> Any:
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{BEFORE}:decisionflow/runtime/passes/branch_attention.py"],
                            check=True, capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "branch_attention_before.py"
        path.write_text(source, encoding="utf-8")
        spec = importlib.util.spec_from_file_location("branch_attention_before", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return module.branch_attention


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    engine = Engine.load(persist_prefixes=False)
    ways = {"merged": earlier_attention(), "one_call": backend.branch_attention}
    timings: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name in PRESETS:
            preset = load_preset(name)
            alone = Rubric.model_validate({**preset.rubric.model_dump(), "reading": "independent"})
            timings.setdefault((name, "shared"), []).append(median_ms(engine, preset.rubric, preset.context, args.repeats))
            for way, attention in ways.items():
                backend.branch_attention = attention
                timings.setdefault((name, way), []).append(median_ms(engine, alone, preset.context, args.repeats))
            backend.branch_attention = ways["one_call"]
    presets = {}
    for name in PRESETS:
        shared, merged, one_call = (statistics.median(timings[(name, way)]) for way in ("shared", "merged", "one_call"))
        presets[name] = {"shared_ms": round(shared, 1), "independent_merged_ms": round(merged, 1),
                         "independent_one_call_ms": round(one_call, 1), "ratio_merged": round(merged / shared, 2),
                         "ratio_one_call": round(one_call / shared, 2)}
    result = {"before": BEFORE, "rounds": args.rounds, "repeats": args.repeats, "presets": presets}
    print(json.dumps(result, indent=2))
    write_results(args.out, result, conditions={"dtype": dtype_of(engine)})


if __name__ == "__main__":
    main()
