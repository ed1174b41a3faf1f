"""Catalog strategies side by side: accuracy on labelled many-label sets, speed on the 255-label preset.

    .venv/bin/python scripts/measure_catalog.py --data ../shared/data --out out/catalog.json

For every strategy in `decisionflow.compiler.Catalog` (full, labels, none), one engine on the same
loaded model decides the same rows; accuracy is over rows whose gold label the field offers. Speed is
the warm median of a request on the `high_cardinality_255` preset (head prefill excluded).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from decisionflow.bench.presets import load_preset
from decisionflow.compiler import Catalog
from decisionflow.quality.evaluate import read_rows
from decisionflow.quality.labelled import load_labelled, offered_labels, select_rows
from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.spec.references import shipped_workflow
from decisionflow.spec.yaml_rubric import load_rubric

SETS = {
    "banking77": ("banking77_intent", "intent", 200),
    "clinc150": ("clinc150_intent", "intent", 300),
}
STRATEGIES = (Catalog.FULL, Catalog.LABELS, Catalog.NONE)


def accuracy(engine: Engine, data: Path, name: str) -> dict:
    workflow, field, limit = SETS[name]
    rubric = load_rubric(shipped_workflow(workflow))
    rows, _ = load_labelled(data / name / "dev.csv", text_column="text", columns={field: "label"})
    offered = set(offered_labels(rubric.field(field)))
    rows = select_rows([r for r in rows if r.gold[field] in offered], limit=limit, seed=0)
    began = time.perf_counter()
    readings = read_rows(engine, rubric, [r.text for r in rows], field)
    right = sum(reading.predicted == row.gold[field] for reading, row in zip(readings, rows))
    compiled, _ = engine.compile(rubric)
    return {"n": len(rows), "accuracy": right / len(rows), "head_tokens": len(compiled.head_tokens),
            "seconds": round(time.perf_counter() - began, 1)}


def speed(engine: Engine, repeats: int) -> dict:
    preset = load_preset("high_cardinality_255")
    compiled, _ = engine.compile(preset.rubric)
    engine.decide(preset.rubric, preset.context)
    times = [engine.decide(preset.rubric, preset.context).stats.timings_ms["total"] for _ in range(repeats)]
    return {"median_ms": statistics.median(times), "head_tokens": len(compiled.head_tokens)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder holding banking77/ and clinc150/ dev.csv")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = Engine.load()
    results = {}
    for strategy in STRATEGIES:
        engine = Engine(base.loaded, options=EngineOptions(catalog=strategy))
        results[strategy.value] = {
            "high_cardinality_255": speed(engine, args.repeats),
            **{name: accuracy(engine, args.data, name) for name in SETS},
        }
        print(strategy.value, json.dumps(results[strategy.value]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
