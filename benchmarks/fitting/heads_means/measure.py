"""The input-mean member as a default: heads fitted with it (the fit's default, layer -8) and without it
(`mean_layers=()`, the three-member fusion) on each set's train.csv, from one read of the rows, then both
scored on dev.csv by `decisionflow eval` as a user runs it, paired row by row (McNemar's exact test).

Each set's rubric is copied to a scratch folder so the shipped heads stay as they are; the fit reports,
the two evals' summaries and the paired figures go into `--out`:

    .venv/bin/python -m benchmarks.fitting.heads_means.measure --sets sst2,banking77,clinc150,nlbse24_issues \
        --out benchmarks/fitting/heads_means/results.json

`--overhead SET` then times single requests of SET's dev rows with either heads file (from the scratch
folder), interleaved in one run, and adds the medians to the results file; `--read-cost SET` times the
fit's read of 300 training rows with and without the input means, interleaved, twice each.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.common import DATA, ROOT, SETS, dtype_of, write_results
from benchmarks.paired_rows import paired, read_rows

SKIP_UNKNOWN = {"clinc150"}
"""Sets whose train.csv holds a label the rubric does not offer (CLINC150's `oos`)."""


class ReadOnce:
    """The engine, with `read_features` answered from its first call: both fits read the same rows."""

    def __init__(self, engine: Any):
        self.engine, self.cached = engine, None

    def read_features(self, *args: Any, **kwargs: Any) -> Any:
        if self.cached is None:
            self.cached = self.engine.read_features(*args, **kwargs)
        return self.cached

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


def fit_both(engine: Any, name: str, scratch: Path) -> dict[str, Any]:
    from decisionflow.cli.fit import _examples
    from decisionflow.fitting.head_fit import fit_examples
    from decisionflow.spec import load_rubric

    rubric_path, field, column = SETS[name]
    rubric_copy = scratch / Path(rubric_path).name
    shutil.copy(ROOT / rubric_path, rubric_copy)
    rubric = load_rubric(rubric_copy)
    examples, skipped = _examples(rubric, DATA / name / "train.csv", [], "text", None, name in SKIP_UNKNOWN)
    reader = ReadOnce(engine)
    report: dict[str, Any] = {}
    for variant, mean_layers in (("with_mean", None), ("without_mean", ())):
        began = time.perf_counter()
        result = fit_examples(reader, rubric, examples, skipped=skipped, mean_layers=mean_layers)
        result.heads.save(scratch / f"{variant}.heads.safetensors")
        info = result.fields[field]
        report[variant] = {
            "seconds": round(time.perf_counter() - began, 1), "timings_s": result.timings_s,
            "chosen": info.chosen, "fusion": info.fusion, "mean_layers": list(info.mean_layers),
            "cv": {readout: figure.accuracy for readout, figure in info.candidates.items()},
            "fields": {f: {"chosen": i.chosen, "fusion": i.fusion, "mean_layers": list(i.mean_layers)}
                       for f, i in result.fields.items()},
        }
        print(f"{name} {variant}: {info.chosen} {info.fusion} cv {report[variant]['cv']} "
              f"({report[variant]['seconds']} s)", flush=True)
    return report


def evaluate(name: str, scratch: Path, variant: str) -> dict[str, Any]:
    rubric_path, field, _ = SETS[name]
    out = scratch / f"eval-{variant}"
    command = [str(ROOT / ".venv/bin/decisionflow"), "eval", str(scratch / Path(rubric_path).name), "--data",
               str(DATA / name / "dev.csv"), "--field", field, "--heads", str(scratch / f"{variant}.heads.safetensors"),
               "--out", str(out)]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} {variant}: eval failed:\n{done.stderr[-2000:]}")
    summary = json.loads(done.stdout)
    return {"seconds": round(time.perf_counter() - began, 1), "accuracy": summary["accuracy"],
            "macro_f1": summary.get("macro_f1"), "n": summary["n"], "rows": str(out / "rows.jsonl")}


def overhead(engine: Any, name: str, scratch: Path, *, requests: int = 40, repeats: int = 5) -> dict[str, Any]:
    """Per-request latency with the heads fitted with and without the mean member, interleaved (same texts)."""
    from benchmarks.common import interleaved_medians, labelled
    from decisionflow.runtime.heads.fitted import Heads
    from decisionflow.spec import load_rubric

    rubric_path, _, _ = SETS[name]
    rubric = load_rubric(scratch / Path(rubric_path).name)
    heads = {variant: Heads.load(scratch / f"{variant}.heads.safetensors") for variant in ("with_mean", "without_mean")}
    texts = [row.text for row in labelled(name, "dev")[:requests]]
    medians, _ = interleaved_medians(engine, rubric, texts, heads, repeats)
    print(f"{name}: median ms with the mean member {medians['with_mean']:.1f}, without {medians['without_mean']:.1f}",
          flush=True)
    return {"requests": len(texts), "repeats": repeats, "median_ms": medians,
            "ratio": medians["with_mean"] / medians["without_mean"]}


def read_cost(engine: Any, name: str, *, rows: int = 300, repeats: int = 2) -> dict[str, Any]:
    """Seconds to read `rows` training rows as the fit reads them, with and without the input means."""
    from benchmarks.common import labelled
    from decisionflow.runtime.heads.fitted import DEFAULT_LAYERS, DEFAULT_MEAN_LAYERS
    from decisionflow.spec import load_rubric

    rubric_path, field, _ = SETS[name]
    rubric = load_rubric(ROOT / rubric_path)
    kept = [row for row in labelled(name, "train") if row.gold[field] in rubric.fields[field].labels][:rows]
    texts, write = [row.text for row in kept], [{field: row.gold[field]} for row in kept]
    engine.read_features(rubric, texts[:20], layers=DEFAULT_LAYERS, write=write[:20])  # warm the head
    seconds: dict[str, list[float]] = {"without_mean": [], "with_mean": []}
    for _ in range(repeats):
        for variant, mean_layers in (("without_mean", ()), ("with_mean", DEFAULT_MEAN_LAYERS)):
            began = time.perf_counter()
            engine.read_features(rubric, texts, layers=DEFAULT_LAYERS, write=write, mean_layers=mean_layers)
            seconds[variant].append(round(time.perf_counter() - began, 2))
    print(f"{name}: reading {len(texts)} rows took {seconds} s", flush=True)
    return {"rows": len(texts), "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default="sst2,banking77,clinc150,nlbse24_issues")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/heads_means"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--overhead", metavar="SET", help="time requests with either fitted heads file of SET")
    parser.add_argument("--read-cost", metavar="SET", help="time the fit's read of SET's rows with and without means")
    args = parser.parse_args()
    from decisionflow import Engine

    engine = Engine.load()
    if args.overhead or args.read_cost:
        results = json.loads(args.out.read_text(encoding="utf-8")) if args.out and args.out.is_file() else {}
        if args.overhead:
            results.setdefault("overhead", {})[args.overhead] = overhead(engine, args.overhead,
                                                                         args.scratch / args.overhead)
        if args.read_cost:
            results.setdefault("read_cost", {})[args.read_cost] = read_cost(engine, args.read_cost)
        write_results(args.out, results, conditions={"dtype": dtype_of(engine)})
        return
    results: dict[str, Any] = {}
    for name in args.sets.split(","):
        scratch = args.scratch / name
        scratch.mkdir(parents=True, exist_ok=True)
        figures = fit_both(engine, name, scratch)
        for variant in ("with_mean", "without_mean"):
            figures[variant]["dev"] = evaluate(name, scratch, variant)
            if args.out is not None:  # each dev row's answer, kept beside the results for the pairing
                kept = args.out.parent / f"{name}-{variant}.rows.jsonl"
                shutil.copy(figures[variant]["dev"]["rows"], kept)
                figures[variant]["dev"]["rows"] = str(kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept)
        skip = {"oos"} if name in SKIP_UNKNOWN else set()
        figures["paired_dev"] = paired(read_rows(Path(figures["with_mean"]["dev"]["rows"])),
                                       read_rows(Path(figures["without_mean"]["dev"]["rows"])), skip)
        print(f"{name}: dev with {figures['paired_dev']['accuracy_first']:.4f}, without "
              f"{figures['paired_dev']['accuracy_second']:.4f}, only with / only without right "
              f"{figures['paired_dev']['only_first_right']} / {figures['paired_dev']['only_second_right']}, "
              f"p {figures['paired_dev']['mcnemar_p']:.3g}", flush=True)
        results[name] = figures
        write_results(args.out, {"sets": results}, conditions={"dtype": dtype_of(engine)})
    if args.out is None:
        json.dump(results, sys.stdout, indent=2)


if __name__ == "__main__":
    main()
