"""What several benchmarks share: the repository's root, the labelled development sets and their rubrics,
and the seeded per-label sample the fitted-heads and in-context measurements draw their rows with."""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
# The runners' `DATA=...` (exported, or given on their command line) reaches the measurers too.
DATA = Path(os.environ.get("DATA") or ROOT.parent / "shared" / "data").resolve()
SETS = {
    "banking77": ("workflows/banking77_intent.yaml", "intent", "label"),
    "clinc150": ("workflows/clinc150_intent.yaml", "intent", "label"),
    "sst2": ("workflows/sentiment.yaml", "sentiment", "label"),
    "nlbse24_issues": ("workflows/issue_triage.yaml", "label", "label"),
}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def subsample(gold: torch.Tensor, k: int | None, seed: int = 0) -> list[int]:
    if k is None:
        return list(range(len(gold)))
    by = defaultdict(list)
    for i, g in enumerate(gold.tolist()):
        by[g].append(i)
    rng = random.Random(seed)
    chosen = []
    for g in sorted(by):
        chosen += rng.sample(by[g], min(k, len(by[g])))
    return sorted(chosen)


def machine() -> dict[str, Any]:
    """What a timing depends on, written beside every result: processor and its flags, threads, versions,
    the oneDNN instruction-set cap when one is set (`ONEDNN_MAX_CPU_ISA`), the date."""
    import transformers

    from decisionflow.bench.runner import CPU_FLAGS
    from decisionflow.runtime.model.loading import cpu_flags, cpu_model

    return {
        "cpu": cpu_model(),
        "cpu_flags": [flag for flag in CPU_FLAGS if flag in cpu_flags()],
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "unset"),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def interleaved_medians(engine: Any, rubric: Any, texts: list[str], variants: dict[str, Any], repeats: int) -> tuple[dict[str, float], Any]:
    """Median milliseconds of one `engine.decide` per text under each variant's heads (None: zero-shot),
    interleaved text by text so the variants share the machine's state; and the last decision."""
    import statistics
    import time

    for heads in variants.values():
        engine.decide(rubric, texts[0], heads=heads)  # warm every path
    timings: dict[str, list[float]] = {label: [] for label in variants}
    decision = None
    for _ in range(repeats):
        for text in texts:
            for label, heads in variants.items():
                began = time.perf_counter()
                decision = engine.decide(rubric, text, heads=heads)
                timings[label].append((time.perf_counter() - began) * 1000)
    return {label: statistics.median(values) for label, values in timings.items()}, decision


def write_results(path: Path | None, results: dict[str, Any]) -> None:
    """`results` with the machine they were measured on, as JSON at `path` (nothing when no path is given)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"machine": machine(), **results}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def merge(out: Path, parts: dict[str, Path]) -> None:
    """One results file from a figure's several runs: {name: that run's JSON}, and the machine they ran on."""
    write_results(out, {name: json.loads(path.read_text(encoding="utf-8")) for name, path in parts.items()})


def stamp(path: Path) -> None:
    """Add the machine to a results file another program wrote (a JSON object without one)."""
    results = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(results, dict) and "machine" not in results and "conditions" not in results:
        path.write_text(json.dumps({"machine": machine(), **results}, indent=2) + "\n", encoding="utf-8")


USAGE = """usage: python -m benchmarks.common merge OUT NAME=PATH [NAME=PATH ...]
       python -m benchmarks.common stamp FILE [FILE ...]"""

if __name__ == "__main__":
    import sys

    # What the figures' run.sh call: one file from several runs, or the machine added to one.
    if len(sys.argv) >= 4 and sys.argv[1] == "merge":
        merge(Path(sys.argv[2]), {name: Path(path) for name, path in (item.split("=", 1) for item in sys.argv[3:])})
    elif len(sys.argv) >= 3 and sys.argv[1] == "stamp":
        for name in sys.argv[2:]:
            stamp(Path(name))
    else:
        raise SystemExit(USAGE)
