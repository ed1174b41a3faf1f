"""Catalog strategies side by side: accuracy on the labelled development sets, speed on the 255-label preset.

    .venv/bin/python -m benchmarks.quality.catalog.measure --data ../shared/data --out out/catalog.json

For every strategy in `decisionflow.compiler.Catalog` (full, labels, none), one engine on the same
loaded model decides the same rows; accuracy is over rows whose gold label the field offers, for the
raw readout and for each content-free correction (computed from the same raw reading and the field's
raw reading of the content-free inputs, as the engine does). Speed is the warm median of a request
on the `high_cardinality_255` preset (head prefill excluded); take it on an otherwise idle machine
(`--part speed`), the accuracy anywhere (`--part accuracy`).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.common import dtype_of, write_results
from decisionflow.bench.presets import load_preset
from decisionflow.compiler import Catalog
from decisionflow.fitting import corrections
from decisionflow.fitting.readings import read_rows
from decisionflow.quality.labelled import load_labelled, offered_labels, select_rows
from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.runtime.readout.debias import CONTENT_FREE_INPUTS
from decisionflow.spec.references import shipped_workflow
from decisionflow.spec.rubric import Debias
from decisionflow.spec.yaml_rubric import load_rubric
from decisionflow.stats import metrics

SETS = {
    "banking77": ("banking77_intent", "intent", 200),
    "clinc150": ("clinc150_intent", "intent", 300),
    "sst2": ("sentiment", "sentiment", 200),
    "nlbse24_issues": ("issue_triage", "label", 150),
}
STRATEGIES = (Catalog.FULL, Catalog.LABELS, Catalog.NONE)


def accuracy(engine: Engine, data: Path, name: str) -> dict:
    workflow, field, limit = SETS[name]
    rubric = load_rubric(shipped_workflow(workflow))
    rows, _ = load_labelled(data / name / "dev.csv", text_column="text", columns={field: "label"})
    offered = set(offered_labels(rubric.field(field)))
    rows = select_rows([r for r in rows if r.gold[field] in offered], limit=limit, seed=0)
    began = time.perf_counter()
    readings = read_rows(engine, rubric, [r.text for r in rows], field, debias="none")
    seconds = time.perf_counter() - began
    free = read_rows(engine, rubric, list(CONTENT_FREE_INPUTS), field, debias="none")
    prior = corrections.mean_prior([r.probabilities for r in free])
    gold = [row.gold[field] for row in rows]
    figures = {}
    for method in (Debias.NONE, Debias.CONTENT_FREE_HALF, Debias.CONTENT_FREE):
        divided = [corrections.divide(r.probabilities, prior, method.strength) for r in readings]
        figures[method.value] = metrics.accuracy(gold, [metrics.top_label(d) for d in divided])
    compiled, _ = engine.compile(rubric)
    return {"n": len(rows), "accuracy": figures, "head_tokens": len(compiled.prefix_tokens), "seconds": round(seconds, 1)}


def speed(engine: Engine, repeats: int) -> dict:
    preset = load_preset("high_cardinality_255")
    compiled, _ = engine.compile(preset.rubric)
    engine.decide(preset.rubric, preset.context)
    times = [engine.decide(preset.rubric, preset.context).stats.timings_ms["total"] for _ in range(repeats)]
    return {"median_ms": statistics.median(times), "head_tokens": len(compiled.prefix_tokens)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="folder holding banking77/ and clinc150/ dev.csv")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--part", choices=("all", "speed", "accuracy"), default="all")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    args = parser.parse_args()
    base = Engine.load(threads=args.threads)
    results = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    results = {key: value for key, value in results.items() if key not in ("conditions", "machine")}
    for strategy in STRATEGIES:
        engine = Engine(base.loaded, options=EngineOptions(catalog=strategy))
        entry = results.setdefault(strategy.value, {})
        if args.part in ("all", "speed"):
            entry["high_cardinality_255"] = speed(engine, args.repeats)
        if args.part in ("all", "accuracy"):
            entry.update({name: accuracy(engine, args.data, name) for name in args.sets.split(",")})
        print(strategy.value, json.dumps(entry), flush=True)
        write_results(args.out, results, conditions={"dtype": dtype_of(base)})


if __name__ == "__main__":
    main()
