"""What several benchmarks share: the repository's root, the labelled development sets and their rubrics
(read strictly by `decisionflow.quality.labelled`), the seeded per-label sample the fitted-heads and
in-context measurements draw their rows with, and the one results format: JSON whose `conditions` block
names the machine, the versions, the number format, the date and the command that measured it."""

from __future__ import annotations

import datetime
import json
import os
import platform
import random
import shlex
import sys
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from decisionflow.quality.labelled import LabelledRow

ROOT = Path(__file__).resolve().parents[1]
# The runners' `DATA=...` (exported, or given on their command line) reaches the measurers too.
DATA = Path(os.environ.get("DATA") or ROOT.parent / "shared" / "data").resolve()
SETS = {
    "banking77": ("workflows/banking77_intent.yaml", "intent", "label"),
    "clinc150": ("workflows/clinc150_intent.yaml", "intent", "label"),
    "sst2": ("workflows/sentiment.yaml", "sentiment", "label"),
    "nlbse24_issues": ("workflows/issue_triage.yaml", "label", "label"),
}
"""Set -> (its shipped rubric, the field its labels answer, the column holding them)."""


def labelled(name: str, split: str) -> list[LabelledRow]:
    """Every row of a development set's `split` file (`DATA/<name>/<split>.csv`), read strictly by
    `quality.labelled.load_labelled` (RFC 4180 quoting; a malformed or short row is refused, naming it).
    Each row's `gold` holds the set's field (`SETS`: read from its label column) and every other field of
    the set's rubric the file has a column of the same name for (issue_triage: `repo`)."""
    from decisionflow.quality.labelled import load_labelled, load_records
    from decisionflow.spec.yaml_rubric import load_rubric

    rubric_path, field, column = SETS[name]
    path = DATA / name / f"{split}.csv"
    header, _ = load_records(path)
    others = {other: other for other in load_rubric(ROOT / rubric_path).fields if other != field and other in header}
    rows, _ = load_labelled(path, text_column="text", columns={field: column, **others})
    return rows


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


def measured_conditions(dtype: str | None = None) -> dict[str, Any]:
    """What a figure depends on, the `conditions` block of every results file: the processor (its model,
    the instruction sets a timing depends on, its cores), the oneDNN instruction-set cap when one is set
    (`ONEDNN_MAX_CPU_ISA`), torch's threads, the Python, torch and transformers versions, the number
    format (`dtype`: as the runner gives it, else what the engine's `auto` picks on this machine), the
    date (UTC) and the command line that ran."""
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
        "dtype": dtype or default_dtype(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
    }


def dtype_of(engine: Any) -> str:
    """The number format an engine runs in (`bfloat16`, `float32`), for a results file's conditions."""
    return str(engine.backend.dtype).removeprefix("torch.")


def default_dtype() -> str:
    """The number format the engine's `auto` picks on this machine (`$DECISIONFLOW_DTYPE` when set)."""
    from decisionflow.runtime.model.loading import resolve_dtype

    return "auto: " + str(resolve_dtype("auto", torch.device("cpu"))).removeprefix("torch.")


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


def write_results(path: Path | None, results: dict[str, Any], *, conditions: dict[str, Any] | None = None) -> None:
    """`results` as JSON at `path` (nothing when no path is given), after a `conditions` block: the machine
    and the run (`measured_conditions`), updated with the runner's own `conditions` (its `dtype`, say), and
    the folder's `run.sh` when the file is written beside one. A `conditions` or `machine` block already
    in `results` (a file read back to be added to) is replaced."""
    if path is None:
        return
    block = measured_conditions((conditions or {}).get("dtype"))
    block.update({key: value for key, value in (conditions or {}).items() if value is not None})
    if (path.parent / "run.sh").is_file() and path.resolve().is_relative_to(ROOT):
        block["runner"] = f"bash {(path.parent / 'run.sh').resolve().relative_to(ROOT)}"
    body = {key: value for key, value in results.items() if key not in ("conditions", "machine")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"conditions": block, **body}, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def merge(out: Path, parts: dict[str, Path], dtype: str | None = None) -> None:
    """One results file from a figure's several runs: {name: that run's JSON}, under the conditions they ran in."""
    write_results(out, {name: json.loads(path.read_text(encoding="utf-8")) for name, path in parts.items()},
                  conditions={"dtype": dtype})


def stamp(path: Path, dtype: str | None = None) -> None:
    """Add the conditions to a results file another program wrote (a JSON object without a `conditions`
    or `machine` block); a file that has one is left as it is."""
    results = json.loads(path.read_text(encoding="utf-8"))
    if isinstance(results, dict) and "machine" not in results and "conditions" not in results:
        write_results(path, results, conditions={"dtype": dtype})


USAGE = """usage: python -m benchmarks.common merge [--dtype=D] OUT NAME=PATH [NAME=PATH ...]
       python -m benchmarks.common stamp [--dtype=D] FILE [FILE ...]
--dtype: the number format(s) the runs used, when not the engine's default on this machine"""


def main(arguments: list[str]) -> None:
    """What the figures' run.sh call: one file from several runs, or the conditions added to one."""
    command, *rest = arguments or [""]
    dtype = rest.pop(0).removeprefix("--dtype=") if rest and rest[0].startswith("--dtype=") else None
    if command == "merge" and len(rest) >= 2:
        merge(Path(rest[0]), {name: Path(path) for name, path in (item.split("=", 1) for item in rest[1:])}, dtype)
    elif command == "stamp" and rest:
        for name in rest:
            stamp(Path(name), dtype)
    else:
        raise SystemExit(USAGE)


if __name__ == "__main__":
    main(sys.argv[1:])
