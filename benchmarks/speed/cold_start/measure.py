"""Cold CLI runs of one rubric, timed from outside the process, with the CLI's own breakdown.

    .venv/bin/python -m benchmarks.speed.cold_start.measure                       # support_triage, 4 runs
    .venv/bin/python -m benchmarks.speed.cold_start.measure --rubric fintech_fraud --runs 3

The first run uses an empty head cache (so it pays the head prefill and the content-free prior);
the others reuse it, as a user's second and later runs would. The converted model cache is shared
with the user's (`~/.cache/decisionflow/models`), so no run converts the GGUF file. Each run is
`decisionflow run RUBRIC --text TEXT --json --timings` in a new process; wall time is measured by
this script around the whole process. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, write_results
from decisionflow.runtime.model.loading import cache_root

TEXTS = {
    "support_triage": ROOT / "decisionflow" / "bench" / "data" / "support_ticket.txt",
    "fintech_fraud": ROOT / "decisionflow" / "bench" / "data" / "fraud_alert.txt",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rubric", default="support_triage", choices=sorted(TEXTS))
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    text = TEXTS[args.rubric].read_text(encoding="utf-8").strip()
    command = [sys.executable, "-m", "decisionflow.cli", "run", str(ROOT / "workflows" / f"{args.rubric}.yaml"),
               "--text", text, "--json", "--timings"] + (["--threads", str(args.threads)] if args.threads else [])
    results = []
    with tempfile.TemporaryDirectory() as folder:
        cache = Path(folder)
        (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)
        env = {**os.environ, "DECISIONFLOW_CACHE": str(cache)}
        for run in range(args.runs):
            began = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
            wall = time.perf_counter() - began
            if done.returncode != 0:
                sys.exit(f"run {run + 1} failed: {done.stderr.strip()[-2000:]}")
            output = json.loads(done.stdout)
            entry = {"run": run + 1, "wall_s": round(wall, 2), "head_source": output["stats"]["prefix_source"],
                     "timings_ms": {k: round(v) for k, v in output["timings_ms"].items()}}
            results.append(entry)
            print(json.dumps(entry), flush=True)
    write_results(args.out, {"rubric": args.rubric, "runs": results})


if __name__ == "__main__":
    main()
