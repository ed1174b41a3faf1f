"""Throughput of a server whose rubrics are read under different adapters, against one whose rubrics are not.

    .venv/bin/python -m benchmarks.serving.adapters.measure --out benchmarks/serving/adapters/results.json

One `decisionflow serve` process on a loopback port serves a folder of three copies of `workflows/sentiment.yaml`:
`plain_a` and `plain_b` without an adapter, `tuned` with a LoRA adapter beside it (tuned first with `decisionflow
tune --keep` on 16 rows of `tests/fixtures/sst2_sample.csv`: what it learnt does not matter here, only that its
route reads the model with an adapter merged). Concurrent clients (keep-alive connections) send
`/v1/rubrics/NAME/decide` requests of short sentences, in three mixes, interleaved round by round so that they share
the machine's state:

- `one rubric`: every request to `plain_a` (its requests can share every pass);
- `two plain rubrics`: requests alternate between `plain_a` and `plain_b` (two routes, no adapter: passes are per
  rubric already, so this is the fair baseline for the next);
- `plain and tuned`: requests alternate between `plain_a` and `tuned` (the tuned route's rows run on the adapted
  engine, in passes of their own).

It reports requests per second and p50/p99 latency per mix, the median over the rounds. Run it on an otherwise
idle machine: every number is a wall-clock measurement.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import write_results
from benchmarks.serving.throughput.measure import start_server, timed_clients

ROOT = Path(__file__).resolve().parents[3]
PYTHON = sys.executable
SENTENCES = [
    "a gorgeous, witty film", "dull and long", "the cast is wonderful", "a mess from start to end",
    "i laughed all the way through", "not worth the ticket", "a quiet, moving portrait", "the plot makes no sense",
]
MIXES = {
    "one rubric": ("plain_a", "plain_a"),
    "two plain rubrics": ("plain_a", "plain_b"),
    "plain and tuned": ("plain_a", "tuned"),
}


def rubric_folder(folder: Path) -> Path:
    """Three copies of the sentiment workflow, and an adapter beside one of them."""
    for name in ("plain_a", "plain_b", "tuned"):
        shutil.copy(ROOT / "workflows" / "sentiment.yaml", folder / f"{name}.yaml")
    subprocess.run([PYTHON, "-m", "decisionflow.cli", "tune", str(folder / "tuned.yaml"), "--data",
                    str(ROOT / "tests" / "fixtures" / "sst2_sample.csv"), "--label", "sentiment=label", "--max-rows", "16",
                    "--keep", "--json"], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return folder


def post(connection: http.client.HTTPConnection, route: str, text: str) -> float:
    began = time.perf_counter()
    connection.request("POST", f"/v1/rubrics/{route}/decide", body=json.dumps({"text": text}).encode(),
                       headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"{route}: status {response.status}")
    return time.perf_counter() - began


def load(port: int, routes: tuple[str, str], clients: int, per_client: int) -> dict:
    """Every client sends `per_client` requests; client n's k-th goes to routes[(n + k) % 2]."""
    return timed_clients(port, clients, per_client, lambda connection, number, k: post(
        connection, routes[(number + k) % 2], SENTENCES[(number * per_client + k) % len(SENTENCES)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests-per-client", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        folder = rubric_folder(Path(scratch))
        process, port = start_server(options=("--rubrics", str(folder)))
        try:
            for routes in MIXES.values():  # warm every route (prefix caches, the adapted engine's first pass)
                load(port, routes, 2, 2)
            runs: dict[str, list[dict]] = {mix: [] for mix in MIXES}
            for _ in range(args.rounds):
                for mix, routes in MIXES.items():
                    runs[mix].append(load(port, routes, args.clients, args.requests_per_client))
        finally:
            process.terminate()
            process.wait(60)
    rows = {mix: {key: statistics.median(run[key] for run in found) for key in ("requests_per_s", "p50_ms", "p99_ms")}
            for mix, found in runs.items()}
    print(f"{'mix':<20} {'requests/s':>10} {'p50 ms':>8} {'p99 ms':>8}   ({args.clients} clients, "
          f"{args.requests_per_client} requests each, median of {args.rounds} rounds)")
    for mix, row in rows.items():
        print(f"{mix:<20} {row['requests_per_s']:>10.1f} {row['p50_ms']:>8.0f} {row['p99_ms']:>8.0f}")
    write_results(args.out, {"clients": args.clients, "requests_per_client": args.requests_per_client,
                             "rounds": args.rounds, "medians": rows, "runs": runs})


if __name__ == "__main__":
    main()
