"""Are two engine settings equivalent on the development sets? Paired answers, not one-off impressions.

Runs the same rows of each development set through two engines (say float32 and bfloat16 on the
CPU) with the engine defaults, and reports per set: both accuracies, McNemar's exact p for the
paired difference, the answer agreement rate and the largest difference of any answer's
probability. A setting is *equivalent* to the reference when no set shows a significant loss
(B below A with p < 0.05) and the answers agree on at least 97 % of every set's rows.

    .venv/bin/python -m benchmarks.quality.compare_settings.measure --a dtype=float32 --b dtype=bfloat16 --sets sst2,banking77,clinc150

Settings are `Engine.load` keywords (`dtype=`, `device=`, `loader=`, `pack_weights=`, `debias=`), comma
separated. Rows: every dev row whose label the rubric offers (`--limit N` samples N with seed 0).

With fitted heads (`--fit SET=K,...`): each engine fits its own heads (`fit_heads`, the defaults of
`decisionflow fit`) on the same K training rows per label of each named set (seed 0), then reads the
dev rows with them; a field keeps zero-shot where its head did not win in cross-validation.

    .venv/bin/python -m benchmarks.quality.compare_settings.measure --fit sst2=250,banking77=10,clinc150=10,nlbse24_issues=40
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT, SETS, labelled, subsample, write_results

AGREEMENT = 0.97
SIGNIFICANCE = 0.05


def parse_setting(text: str) -> dict:
    setting = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        setting[key] = {"true": True, "false": False}.get(value.lower(), value)
    return setting


def read(engine, rubric, field: str, texts: list[str], heads=None) -> tuple[list, float]:
    from decisionflow.fitting.readings import read_rows

    began = time.perf_counter()
    readings = read_rows(engine, rubric, texts, field, heads=heads)
    return readings, time.perf_counter() - began


def training_rows(name: str, rubric, field: str, k: int) -> list[tuple[str, dict]]:
    """K training rows per label (seed 0): the same rows for both engines."""
    import torch

    labels = rubric.fields[field].labels
    rows = [r for r in labelled(name, "train") if r.gold[field] in labels]
    chosen = subsample(torch.tensor([labels.index(r.gold[field]) for r in rows]), k)
    return [(rows[i].text, {field: rows[i].gold[field]}) for i in chosen]


def fitted_heads(engine, rubric, rows: list) -> tuple:
    from decisionflow.fitting import fit_heads

    began = time.perf_counter()
    result = fit_heads(engine, rubric, rows)
    return result.heads, time.perf_counter() - began, result.heads.fitted_fields


def compare(name: str, engines: dict, limit: int | None, fit: int | None = None) -> dict:
    from decisionflow.spec import load_rubric
    from decisionflow.stats import mcnemar_exact

    rubric_path, field, _ = SETS[name]
    rubric = load_rubric(ROOT / rubric_path)
    rows = [r for r in labelled(name, "dev") if r.gold[field] in rubric.fields[field].labels]
    if limit is not None and limit < len(rows):
        rows = random.Random(0).sample(rows, limit)
    texts, gold = [r.text for r in rows], [r.gold[field] for r in rows]
    heads = {label: None for label in engines}
    fitting = {}
    if fit is not None:
        train = training_rows(name, rubric, field, fit)
        for label, engine in engines.items():
            heads[label], seconds, fitted = fitted_heads(engine, rubric, train)
            fitting[label] = {"rows": len(train), "seconds": seconds, "fitted_fields": fitted}
            print(f"  {name}: {label} fitted on {len(train)} rows in {seconds:.0f} s; fitted fields {fitted}", flush=True)
    (a, seconds_a), (b, seconds_b) = (read(engine, rubric, field, texts, heads[label]) for label, engine in engines.items())
    right_a = [r.predicted == g for r, g in zip(a, gold)]
    right_b = [r.predicted == g for r, g in zip(b, gold)]
    only_a = sum(x and not y for x, y in zip(right_a, right_b))
    only_b = sum(y and not x for x, y in zip(right_a, right_b))
    p = mcnemar_exact(only_a, only_b)
    agreement = sum(x.predicted == y.predicted for x, y in zip(a, b)) / len(rows)
    largest = max(abs(x.probabilities.get(label, 0.0) - y.probabilities.get(label, 0.0))
                  for x, y in zip(a, b) for label in set(x.probabilities) | set(y.probabilities))
    loss = sum(right_b) < sum(right_a) and p < SIGNIFICANCE
    result = {
        "set": name, "rows": len(rows), "accuracy_a": sum(right_a) / len(rows), "accuracy_b": sum(right_b) / len(rows),
        "only_a_right": only_a, "only_b_right": only_b, "mcnemar_p": p, "agreement": agreement,
        "largest_probability_difference": largest, "seconds_a": seconds_a, "seconds_b": seconds_b,
        "equivalent": not loss and agreement >= AGREEMENT, "fitting": fitting,
    }
    print(f"| {name} | {len(rows)} | {result['accuracy_a']:.3f} | {result['accuracy_b']:.3f} | {only_a} / {only_b} | "
          f"{p:.3g} | {agreement:.3f} | {largest:.3f} | {seconds_a:.0f} / {seconds_b:.0f} | "
          f"{'yes' if result['equivalent'] else 'no'} |", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--a", default="dtype=float32", help="the reference setting")
    parser.add_argument("--b", default="dtype=bfloat16", help="the setting compared with it")
    parser.add_argument("--sets", default="sst2,banking77,clinc150,nlbse24_issues")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--fit", help="SET=K,...: fit heads on K training rows per label of each set first")
    args = parser.parse_args()
    from decisionflow.runtime.engine import Engine

    engines = {label: Engine.load(**parse_setting(text)) for label, text in (("a", args.a), ("b", args.b))}
    print(f"A: {args.a}    B: {args.b}\n")
    print("| set | rows | accuracy A | accuracy B | right only A / only B | McNemar p | agreement | largest |Δp| "
          "| seconds A / B | equivalent |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    fit = {name: int(k) for name, _, k in (part.partition("=") for part in args.fit.split(","))} if args.fit else {}
    sets = list(fit) if fit else args.sets.split(",")
    results = [compare(name, engines, args.limit, fit.get(name)) for name in sets]
    verdict = all(r["equivalent"] for r in results)
    print(f"\nB is {'equivalent' if verdict else 'NOT equivalent'} to A on {', '.join(r['set'] for r in results)} "
          f"(no significant loss at p < {SIGNIFICANCE} and agreement >= {AGREEMENT:.0%} on every set)")
    dtypes = " against ".join(str(parse_setting(text).get("dtype", "auto")) for text in (args.a, args.b))
    write_results(args.out, {"a": args.a, "b": args.b, "fit": fit, "results": results, "equivalent": verdict},
                  conditions={"dtype": dtypes})


if __name__ == "__main__":
    sys.exit(main())
