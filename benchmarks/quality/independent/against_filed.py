"""The 28-question presets read independently, against the shared reading as it was before independent questions.

    .venv/bin/python -m benchmarks.quality.independent.against_filed --out benchmarks/quality/independent/speed-against-filed.json

`measure.py --part speed` compares the independent reading with today's shared reading. The cost target of
independent questions was set against the shared reading of the code that had none (commit FILED: the engine
as it was when the target was written), so this runs that code too: `git archive FILED` unpacked into a scratch
folder, imported by a process of its own (`PYTHONPATH`), and this checkout's code in another process, turn about,
ROUNDS times on the same machine. Each turn loads the model, warms every preset once and times the median of
`--repeats` warm requests. Reported per preset: the medians over the rounds of the filed shared reading, today's
shared reading and today's independent reading, and the independent reading's ratio to each. The presets' rubrics
and texts are read from each tree's own `bench/presets`, checked to be the same questions.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

FILED = "2fb02ee"
"""The last commit before independent questions: its shared reading is the one the target was set against."""
PRESETS = ("support_triage", "code_security", "fintech_fraud")
HERE = Path(__file__).resolve()
ROOT = HERE.parents[3]


def median_ms(engine: Any, rubric: Any, text: str, repeats: int) -> float:
    """The median of `repeats` warm requests (after one to warm), in milliseconds."""
    engine.decide(rubric, text)
    timings = []
    for _ in range(repeats):
        began = time.perf_counter()
        engine.decide(rubric, text)
        timings.append((time.perf_counter() - began) * 1000)
    return statistics.median(timings)


def measure_turn(readings: list[str], repeats: int) -> dict[str, Any]:
    """One process's turn, in whichever tree `decisionflow` is imported from: per preset, the median ms of each reading."""
    import decisionflow
    from decisionflow.bench.presets import load_preset
    from decisionflow.runtime.engine import Engine

    keep_off = {name: False for name in ("persist_prefixes", "persist_heads")
                if name in inspect.signature(Engine.load).parameters}
    engine = Engine.load(**keep_off)
    out: dict[str, Any] = {"tree": str(Path(decisionflow.__file__).resolve().parents[1])}
    for name in PRESETS:
        preset = load_preset(name)
        timings: dict[str, Any] = {"questions": sorted(preset.rubric.fields)}
        for reading in readings:
            rubric = preset.rubric
            if reading == "independent":
                rubric = type(rubric).model_validate({**rubric.model_dump(), "reading": "independent"})
            timings[reading] = median_ms(engine, rubric, preset.context, repeats)
        out[name] = timings
    return out


def _turn(tree: Path, readings: list[str], repeats: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(HERE), "--turn", ",".join(readings), "--repeats", str(repeats)]
    done = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True)
    turn = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(turn.pop("tree")) != tree.resolve():  # the editable install must not win over PYTHONPATH
        raise SystemExit(f"the turn meant for {tree} imported decisionflow from elsewhere")
    return turn


def _unpack(commit: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    with tempfile.TemporaryFile() as file:
        file.write(archive)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(into, filter="data")
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--turn", help=argparse.SUPPRESS)  # internal: one process's turn, printed as JSON
    args = parser.parse_args()
    if args.turn:
        print(json.dumps(measure_turn(args.turn.split(","), args.repeats)))
        return
    rounds = []
    with tempfile.TemporaryDirectory() as scratch:
        filed_tree = _unpack(FILED, Path(scratch))
        for index in range(args.rounds):
            filed = _turn(filed_tree, ["shared"], args.repeats)
            today = _turn(ROOT, ["shared", "independent"], args.repeats)
            rounds.append({"filed": filed, "today": today})
            print(f"round {index + 1}: " + ", ".join(
                f"{name} {filed[name]['shared']:.0f} / {today[name]['shared']:.0f} / {today[name]['independent']:.0f} ms"
                for name in PRESETS), file=sys.stderr)
    presets = {}
    for name in PRESETS:
        if any(r["filed"][name]["questions"] != r["today"][name]["questions"] for r in rounds):
            raise SystemExit(f"{name}: the filed tree's preset asks other questions than this checkout's")
        filed_ms = statistics.median(r["filed"][name]["shared"] for r in rounds)
        shared_ms = statistics.median(r["today"][name]["shared"] for r in rounds)
        alone_ms = statistics.median(r["today"][name]["independent"] for r in rounds)
        presets[name] = {"filed_shared_ms": round(filed_ms, 1), "shared_ms": round(shared_ms, 1),
                         "independent_ms": round(alone_ms, 1),
                         "ratio_to_filed_shared": round(alone_ms / filed_ms, 2),
                         "ratio_to_shared": round(alone_ms / shared_ms, 2)}
    result = {"filed_commit": FILED, "rounds": args.rounds, "repeats": args.repeats, "presets": presets,
              "per_round": [{side: {name: {k: round(v, 1) for k, v in turn[name].items() if k != "questions"}
                                    for name in PRESETS} for side, turn in r.items()} for r in rounds]}
    print(json.dumps(result, indent=2))
    if args.out:
        sys.path.insert(0, str(ROOT))
        from benchmarks.common import write_results

        write_results(args.out, result, conditions={"dtype": "auto (bfloat16 on this CPU)"})


if __name__ == "__main__":
    main()
