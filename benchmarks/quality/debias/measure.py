"""Readout corrections side by side on the development sets: raw, content-free (one input and three),
domain priors, permutation debiasing (averaging over orders, and PriDe), and rubric wording.

    nohup .venv/bin/python -m benchmarks.quality.debias.measure --data ../shared/data --out out/debias > out/debias.log 2>&1 &
    .venv/bin/python -m benchmarks.quality.debias.measure --data ../shared/data --out out/debias --analyse-only

Every set is scored on one field, read in its rubric's first round (each shipped rubric pins its
first field, and the scored field is that one), so its raw distribution does not depend on any
correction: the script stores one raw run per (wording, option order) and computes every correction
from it offline, exactly as the engine would (`decisionflow.fitting.corrections`; the script checks a
few rows against the engine's own `debias="content_free"` readout). Stored runs are reused, so an
interrupted run resumes where it stopped.

- content-free priors: the field's raw distribution for each content-free input of
  `runtime.readout.debias.CONTENT_FREE_INPUTS`, alone and averaged.
- domain priors: cross-fitted: the rows are split into `--folds` seeded folds, and a row's prior is
  the mean raw distribution over the *other* folds' rows (labels unused; for CLINC150 these include
  its out-of-scope rows, as unlabelled traffic would). Smaller unlabelled samples are drawn from the
  same other folds to show how many rows a prior needs.
- permutation debiasing: rows are also read with the options in cyclic shifts of their order
  (`--orders`, capped at the number of labels; two labels = both orders, three = all rotations), all
  rows or a seeded sample of `--permutation-rows` of them, scored in a table of their own with raw,
  content-free and domain repeated on the same rows.
  `permute` averages a row's distributions over the orders; `pride` divides the original order's
  distribution by a prior over positions estimated on the other folds' rows (Zheng et al., 2023).
- wording: the rubric as shipped against its minimal variant (no instructions, no descriptions), and
  any `--wording SET:NAME=PATH` rubric file with the same fields and labels.

Accuracy and macro-F1 are over rows whose gold label the field offers; ECE over the same rows. Every
method is compared with raw by a paired bootstrap (`decisionflow.quality.significance`): win, tie or
loss by the 95 % interval of the difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import dtype_of, write_results
from decisionflow.fitting import corrections
from decisionflow.fitting.readings import read_rows
from decisionflow.quality.labelled import LabelledRow, load_labelled, select_rows
from decisionflow.quality.significance import paired_difference
from decisionflow.quality.variants import choice_labels, cyclic_orders, minimal_rubric, reordered_rubric
from decisionflow.runtime.readout.debias import CONTENT_FREE_INPUTS
from decisionflow.spec.rubric import Debias, Rubric
from decisionflow.spec.yaml_rubric import load_rubric
from decisionflow.stats import expected_calibration_error, metrics

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class DataSet:
    rubric: str
    data: str
    field: str
    column: str = "label"


SETS = {
    "sst2": DataSet("workflows/sentiment.yaml", "sst2/dev.csv", "sentiment"),
    "banking77": DataSet("workflows/banking77_intent.yaml", "banking77/dev.csv", "intent"),
    "clinc150": DataSet("workflows/clinc150_intent.yaml", "clinc150/dev.csv", "intent"),
    "issues": DataSet("workflows/issue_triage.yaml", "nlbse24_issues/dev.csv", "label"),
}
SAMPLE_SIZES = (20, 50, 100)
WORDING_METHODS = ("raw", "content_free_half", "content_free", "domain")
SAMPLE_DRAWS = 5
PRIDE_FEW_ROWS = 20


def log(message: str) -> None:
    print(time.strftime("[%H:%M:%S] ") + message, flush=True)


# -- collecting raw runs ----------------------------------------------------------------------------


def run_path(out: Path, name: str, wording: str, order: int) -> Path:
    return out / name / f"{wording}-order{order}.jsonl"


def collect(engine: Any, rubric: Rubric, field: str, rows: list[LabelledRow], path: Path, label: str) -> dict[str, Any]:
    """Raw distributions of `field` for every row and for each content-free input, stored at `path`."""
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        if stored["rows"] == [r.index for r in rows]:
            log(f"{label}: reusing {path}")
            return stored
    if engine is None:
        sys.exit(f"{label}: no stored run at {path}; run without --analyse-only first")
    began = time.perf_counter()
    last = {"time": 0.0, "done": -1}

    def progress(done: int, total: int) -> None:
        if done != last["done"] and (time.perf_counter() - last["time"] > 30 or done == total):
            last.update(time=time.perf_counter(), done=done)
            log(f"{label}: {done}/{total} rows, {time.perf_counter() - began:.0f} s")

    readings = read_rows(engine, rubric, [r.text for r in rows], field, debias="none", progress=progress)
    free = read_rows(engine, rubric, list(CONTENT_FREE_INPUTS), field, debias="none")
    stored = {
        "rows": [r.index for r in rows],
        "labels": choice_labels(rubric, field),
        "distributions": [r.probabilities for r in readings],
        "candidate_mass": [r.candidate_mass for r in readings],
        "errors": [r.error for r in readings],
        "content_free": {text: r.probabilities for text, r in zip(CONTENT_FREE_INPUTS, free)},
        "seconds": round(time.perf_counter() - began, 1),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored) + "\n", encoding="utf-8")
    log(f"{label}: done in {stored['seconds']} s")
    return stored


def online_check(engine: Any, rubric: Rubric, field: str, rows: list[LabelledRow], stored: dict[str, Any]) -> float:
    """Largest difference between the engine's content-free readout and the offline one, on a few rows."""
    texts = [r.text for r in rows[:8]]
    online = read_rows(engine, rubric, texts, field, debias="content_free")
    prior = corrections.mean_prior(list(stored["content_free"].values()))
    worst = 0.0
    for reading, raw in zip(online, stored["distributions"][:8]):
        offline = corrections.divide(raw, prior)
        worst = max(worst, max(abs(reading.probabilities[k] - offline[k]) for k in offline))
    return worst


# -- scoring ----------------------------------------------------------------------------------------


def figures(gold: list[str], distributions: list[dict[str, float]], reference: list[str | None] | None) -> dict[str, Any]:
    predicted = [metrics.top_label(d) for d in distributions]
    confidences = [d[p] for d, p in zip(distributions, predicted)]  # type: ignore[index]
    result: dict[str, Any] = {
        "accuracy": metrics.accuracy(gold, predicted),
        "macro_f1": metrics.macro_f1(gold, predicted),
        "ece": expected_calibration_error(confidences, [p == g for p, g in zip(predicted, gold)]),
        "predicted_labels": len(set(predicted)),
    }
    if reference is not None:
        result["vs_raw_accuracy"] = paired_difference(gold, predicted, reference).to_dict()
        result["vs_raw_macro_f1"] = paired_difference(gold, predicted, reference, score=metrics.macro_f1).to_dict()
    return result


def flip_rate(per_order: list[list[dict[str, float]]], scored: list[int]) -> float | None:
    """Mean over the other orders of the fraction of scored rows whose top label differs from order 0's."""
    if len(per_order) < 2:
        return None
    first = [metrics.top_label(per_order[0][i]) for i in scored]
    rates = [sum(metrics.top_label(order[i]) != f for i, f in zip(scored, first)) / len(scored) for order in per_order[1:]]
    return sum(rates) / len(rates)


def corrected_runs(stored: dict[str, Any], folds: list[int], seed: int) -> dict[str, list[dict[str, float]]]:
    """Every single-run correction of one stored run (raw, content-free variants, domain priors)."""
    raw = stored["distributions"]
    free = stored["content_free"]
    runs = {"raw": raw}
    for text, prior in free.items():
        runs[f"content_free[{text}]"] = [corrections.divide(d, prior) for d in raw]
    three = corrections.mean_prior(list(free.values()))
    runs["content_free"] = [corrections.divide(d, three) for d in raw]
    runs["content_free_half"] = [corrections.divide(d, three, Debias.CONTENT_FREE_HALF.strength) for d in raw]
    priors = corrections.cross_fitted_priors(raw, folds)
    runs["domain"] = [corrections.divide(d, p) for d, p in zip(raw, priors)]
    return runs


def restricted(stored: dict[str, Any], positions: list[int]) -> dict[str, Any]:
    """A stored run cut down to some of its rows (by position)."""
    return {**stored, "rows": [stored["rows"][i] for i in positions],
            "distributions": [stored["distributions"][i] for i in positions]}


def score_methods(gold_all: list[str], labels: set[str], methods: dict[str, list[dict[str, float]]]) -> dict[str, Any]:
    """Every method's figures over the rows whose gold label is offered, each compared with raw."""
    scored = [i for i, g in enumerate(gold_all) if g in labels]
    gold = [gold_all[i] for i in scored]
    raw_predicted = [metrics.top_label(methods["raw"][i]) for i in scored]
    return {
        method: figures(gold, [runs[i] for i in scored], None if method == "raw" else raw_predicted)
        for method, runs in methods.items()
    }


def analyse_set(spec: DataSet, order0: dict[str, Any], reordered: list[dict[str, Any]], subset: list[int],
                wordings: dict[str, dict[str, Any]], gold_all: list[str], orders: list[list[str]],
                args: argparse.Namespace) -> dict[str, Any]:
    """Single-pass corrections on every row; permutation methods on the rows read in every order."""
    labels = set(orders[0])
    scored = [i for i, g in enumerate(gold_all) if g in labels]
    gold = [gold_all[i] for i in scored]
    folds = corrections.fold_of_rows(len(gold_all), args.folds, args.seed)
    single = score_methods(gold_all, labels, corrected_runs(order0, folds, args.seed))
    samples = {}
    raw_all = order0["distributions"]
    for size in SAMPLE_SIZES:
        accuracies = []
        for draw in range(SAMPLE_DRAWS):
            priors = corrections.cross_fitted_priors(raw_all, folds, sample=size, seed=args.seed + draw)
            divided = [corrections.divide(raw_all[i], priors[i]) for i in scored]
            accuracies.append(metrics.accuracy(gold, [metrics.top_label(d) for d in divided]))
        samples[str(size)] = {"mean": statistics.mean(accuracies), "min": min(accuracies), "max": max(accuracies)}
    wording_table = {}
    for wording, stored in wordings.items():
        runs = corrected_runs(stored, folds, args.seed)
        wording_table[wording] = {
            method: figures(gold, [runs[method][i] for i in scored], None) for method in WORDING_METHODS
        }
    result: dict[str, Any] = {
        "rubric": spec.rubric, "field": spec.field, "rows": len(gold_all), "scored_rows": len(scored),
        "labels": len(orders[0]), "orders": len(orders), "folds": args.folds,
        "domain_prior_rows": len(gold_all) // args.folds,
        "methods": single, "domain_prior_sample_sizes": samples, "wording": wording_table,
        "seconds": {"order0": order0["seconds"]} | {f"order{k + 1}": s["seconds"] for k, s in enumerate(reordered)}
        | {w: s["seconds"] for w, s in wordings.items() if w != "shipped"},
    }
    if reordered:
        sub_gold = [gold_all[i] for i in subset]
        sub_stored = [restricted(order0, subset)] + reordered
        sub_folds = corrections.fold_of_rows(len(subset), args.folds, args.seed)
        per_order = [corrected_runs(stored, sub_folds, args.seed) for stored in sub_stored]
        methods = {base: per_order[0][base] for base in ("raw", "content_free", "domain")}
        for base in ("raw", "content_free", "domain"):
            methods["permute" if base == "raw" else f"{base}+permute"] = [
                corrections.average_orders([run[base][i] for run in per_order]) for i in range(len(subset))
            ]
        methods["pride"] = pride(sub_stored, orders, sub_folds, sample=None, seed=args.seed)
        methods[f"pride({PRIDE_FEW_ROWS} rows)"] = pride(sub_stored, orders, sub_folds, sample=PRIDE_FEW_ROWS, seed=args.seed)
        sub_scored = [i for i, g in enumerate(sub_gold) if g in labels]
        result["permutation"] = {
            "rows": len(subset), "scored_rows": len(sub_scored),
            "methods": score_methods(sub_gold, labels, methods),
            "flip_rate": {base: flip_rate([run[base] for run in per_order], sub_scored)
                          for base in ("raw", "content_free", "domain")},
        }
    return result


def pride(stored_orders: list[dict[str, Any]], orders: list[list[str]], folds: list[int], *,
          sample: int | None, seed: int) -> list[dict[str, float]]:
    """Original-order distributions divided by a positional prior estimated on the other folds' rows."""
    import random

    count = len(folds)
    result: list[dict[str, float] | None] = [None] * count
    for fold in sorted(set(folds)):
        others = [i for i in range(count) if folds[i] != fold]
        if sample is not None and sample < len(others):
            others = random.Random(seed).sample(others, sample)
        prior = corrections.positional_prior(
            [[stored["distributions"][i] for stored in stored_orders] for i in others], orders
        )
        for i in range(count):
            if folds[i] == fold:
                result[i] = corrections.divide_by_position(stored_orders[0]["distributions"][i], orders[0], prior)
    return result  # type: ignore[return-value]


# -- the report -------------------------------------------------------------------------------------


def method_table(methods: dict[str, Any]) -> list[str]:
    lines = ["| method | accuracy | Δ accuracy vs raw [95 % CI] | macro-F1 | Δ macro-F1 [95 % CI] | ECE | labels predicted |",
             "| --- | ---: | --- | ---: | --- | ---: | ---: |"]
    for method, f in methods.items():
        def diff(key: str, f: dict = f) -> str:
            d = f.get(key)
            return "" if d is None else f"{d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] {d['verdict']}"
        lines.append(f"| {method} | {f['accuracy']:.3f} | {diff('vs_raw_accuracy')} | {f['macro_f1']:.3f} | "
                     f"{diff('vs_raw_macro_f1')} | {f['ece']:.3f} | {f['predicted_labels']} |")
    return lines


def markdown(summary: dict[str, Any]) -> str:
    lines = []
    for name, s in summary["sets"].items():
        lines += [f"## {name}: `{s['rubric']}`, field `{s['field']}` ({s['scored_rows']} scored rows of {s['rows']}, "
                  f"{s['labels']} labels, {s['folds']}-fold domain priors)", ""]
        lines += method_table(s["methods"])
        sizes = ", ".join(f"{k} rows {v['mean']:.3f} ({v['min']:.3f}-{v['max']:.3f})" for k, v in s["domain_prior_sample_sizes"].items())
        lines += ["", f"Domain prior from fewer unlabelled rows (accuracy, mean and range over {SAMPLE_DRAWS} draws): {sizes}."]
        if "permutation" in s:
            p = s["permutation"]
            lines += ["", f"Permutation debiasing: {p['scored_rows']} scored rows of {p['rows']} read in {s['orders']} option orders "
                      "(raw, content-free and domain repeated on the same rows):", ""]
            lines += method_table(p["methods"])
            flips = ", ".join(f"{k} {v:.3f}" for k, v in p["flip_rate"].items() if v is not None)
            lines += ["", f"Option-order flip rate (top label changed vs the shipped order, mean over the other orders): {flips}."]
        if s["wording"]:
            lines += ["", "| wording | " + " | ".join(f"{m} acc | {m} F1" for m in WORDING_METHODS) + " |",
                      "| --- |" + " ---: | ---: |" * len(WORDING_METHODS)]
            for wording, t in s["wording"].items():
                lines.append(f"| {wording} | " + " | ".join(
                    f"{t[m]['accuracy']:.3f} | {t[m]['macro_f1']:.3f}" for m in WORDING_METHODS if m in t) + " |")
        lines += ["", f"Run seconds: {s['seconds']}; engine vs offline content-free readout, largest difference: "
                  f"{summary['online_check'].get(name, 'n/a')}", ""]
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------------------


def parse_wordings(values: list[str]) -> dict[str, dict[str, Path]]:
    found: dict[str, dict[str, Path]] = {}
    for value in values:
        target, _, path = value.partition("=")
        name, _, wording = target.partition(":")
        if not path or not wording or name not in SETS:
            sys.exit(f"--wording expects SET:NAME=PATH with SET one of {', '.join(SETS)}, got {value!r}")
        found.setdefault(name, {})[wording] = Path(path)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "debias")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated: " + ", ".join(SETS))
    parser.add_argument("--orders", type=int, default=4, help="option orders per set, capped at the number of labels")
    parser.add_argument("--permutation-rows", type=int, default=None, metavar="N",
                        help="read the other option orders on a seeded sample of N of the rows (default: all)")
    parser.add_argument("--folds", type=int, default=2)
    parser.add_argument("--limit", type=int, default=None, help="a seeded sample of N rows per set (default: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--wording", action="append", default=[], metavar="SET:NAME=PATH")
    parser.add_argument("--analyse-only", action="store_true", help="only read stored runs (fails where one is missing)")
    args = parser.parse_args()
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    unknown = [n for n in names if n not in SETS]
    if unknown:
        sys.exit(f"unknown set {unknown[0]!r} (sets: {', '.join(SETS)})")
    extra = parse_wordings(args.wording)
    engine = None
    if not args.analyse_only:
        from decisionflow.runtime.engine import Engine

        engine = Engine.load(threads=args.threads, persist_prefixes=False)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {"sets": {}, "online_check": {}}
    for name in names:
        spec = SETS[name]
        rubric = load_rubric(ROOT / spec.rubric)
        rows, _ = load_labelled(args.data / spec.data, text_column="text", columns={spec.field: spec.column})
        rows = select_rows(rows, limit=args.limit, seed=args.seed)
        orders = cyclic_orders(choice_labels(rubric, spec.field), args.orders)
        subset_rows = select_rows(rows, limit=args.permutation_rows, seed=args.seed)
        subset = [position for position, row in enumerate(rows) if row in subset_rows]
        log(f"{name}: {len(rows)} rows; {len(orders)} orders on {len(subset)} of them")
        order0 = collect(engine, rubric, spec.field, rows, run_path(args.out, name, "shipped", 0),
                         f"{name} shipped order 1/{len(orders)}")
        reordered = [
            collect(engine, reordered_rubric(rubric, spec.field, order), spec.field, subset_rows,
                    run_path(args.out, name, "shipped", k), f"{name} shipped order {k + 1}/{len(orders)}")
            for k, order in enumerate(orders) if k
        ]
        if engine is not None:
            summary["online_check"][name] = online_check(engine, rubric, spec.field, rows, order0)
        wordings = {"shipped": order0}
        variants = {"minimal": minimal_rubric(rubric)} | {w: load_rubric(p) for w, p in extra.get(name, {}).items()}
        for wording, variant in variants.items():
            wordings[wording] = collect(engine, variant, spec.field, rows, run_path(args.out, name, wording, 0),
                                        f"{name} {wording}")
        gold = [r.gold[spec.field] for r in rows]
        summary["sets"][name] = analyse_set(spec, order0, reordered, subset, wordings, gold, orders, args)
        write_results(summary_path, summary, conditions={"dtype": dtype_of(engine) if engine is not None else None})
        (args.out / "summary.md").write_text(markdown(summary), encoding="utf-8")
        log(f"{name}: analysed; {args.out / 'summary.md'}")


if __name__ == "__main__":
    main()
