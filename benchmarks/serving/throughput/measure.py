"""Measure serving and batch throughput side by side in one run; print a table and write a JSON file.

    .venv/bin/python -m benchmarks.serving.throughput.measure                 # everything (~5-10 minutes on 2 cores)
    .venv/bin/python -m benchmarks.serving.throughput.measure --skip-ray      # the server and the plain batch runs, no Ray

Serving: `decisionflow serve` is started twice on a loopback port, once with micro-batching and once
without (`--no-batching`); for 1, 8 and 32 concurrent clients (keep-alive connections, each sending
`--requests-per-client` `/v1/systemone` requests of three questions about short tickets) it reports
requests per second and p50/p99 latency.

Batch: `decisionflow run` over JSONL files of N and 2N rows with the plain engine and with
`--engine ray` (a local cluster of `--num-actors` actors). Each run's wall time includes loading the
model (and starting Ray); the marginal rate N / (t(2N) - t(N)) leaves those one-off costs out. The
Ray runs happen inside a network namespace with only loopback (`unshare -n`, as root), so the cluster
never binds an outward interface; where that is impossible they are skipped and the JSON says why.

Run it on an otherwise idle machine: every number is a wall-clock measurement.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
TICKETS = [
    "I was charged twice for my March invoice, please refund the duplicate",
    "my parcel has not arrived after three weeks and tracking is stuck",
    "the blender came broken, I want to send it back",
    "how do I download last year's receipts",
    "your courier left the box in the rain, everything is soaked",
    "cancel my subscription and refund this month",
    "the app charges me in dollars instead of euros",
    "I need to change the delivery address of order 4411",
]
QUESTIONS = {
    "refund": {"type": "noul", "instructions": "Does the customer ask for money back"},
    "team": {"type": "choice", "instructions": "Which team handles it",
             "criteria": {"billing": "charges and invoices", "shipping": "delivery and parcels", "returns": "sending goods back"}},
    "urgency": {"type": "score", "instructions": "How urgent the request is",
                "criteria": ["can wait", "this week", "today", "right now"]},
}
SENTENCES = [
    "a gorgeous, witty film", "dull and long", "the cast is wonderful", "a mess from start to end",
    "i laughed all the way through", "not worth the ticket", "a quiet, moving portrait", "the plot makes no sense",
]


# -- serving ------------------------------------------------------------------------------------------


def start_server(batching: bool = True, environment: dict[str, str] | None = None,
                 options: tuple[str, ...] = ()) -> tuple[subprocess.Popen, int]:
    """`decisionflow serve` on a free loopback port (`environment` added to this process's, `options` added to its
    command line): the process and port."""
    command = [PYTHON, "-m", "decisionflow.cli", "serve", "--port", "0", "--log-level", "warning", *options]
    if not batching:
        command.append("--no-batching")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                               env={**os.environ, **(environment or {})})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        match = re.search(r"serving http://127\.0\.0\.1:(\d+)", line)
        if match:
            threading.Thread(target=process.stderr.read, daemon=True).start()  # keep the pipe drained
            return process, int(match.group(1))
    process.kill()
    raise SystemExit("the server did not start")


def post(connection: http.client.HTTPConnection, body: bytes) -> float:
    began = time.perf_counter()
    connection.request("POST", "/v1/systemone", body=body, headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        raise RuntimeError(f"status {response.status}")
    return time.perf_counter() - began


def body_of(index: int) -> bytes:
    return json.dumps({"state": f"{TICKETS[index % len(TICKETS)]} (ticket {index})", "questions": QUESTIONS}).encode()


def load(port: int, clients: int, per_client: int) -> dict:
    return timed_clients(port, clients, per_client,
                         lambda connection, number, k: post(connection, body_of(number * per_client + k)))


def timed_clients(port: int, clients: int, per_client: int,
                  request: Callable[[http.client.HTTPConnection, int, int], float]) -> dict:
    """`clients` keep-alive connections started together, each making `per_client` calls `request(connection, client,
    k)` (each returns its latency in seconds): requests per second and p50/p99 latency."""
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(clients + 1)

    failures: list[str] = []

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        mine = []
        start.wait()
        try:
            for k in range(per_client):
                mine.append(request(connection, number, k))
        except Exception as error:  # noqa: BLE001 - reported below, with the measurement refused
            failures.append(f"client {number}: {error}")
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    if failures:
        raise SystemExit("requests failed, no numbers: " + "; ".join(failures[:3]))
    latencies.sort()
    return {
        "clients": clients, "requests": len(latencies), "wall_s": wall, "requests_per_s": len(latencies) / wall,
        "p50_ms": 1000 * statistics.median(latencies),
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))],
    }


def measure_serving(per_client: int, concurrency: list[int]) -> list[dict]:
    rows = []
    for batching in (True, False):
        process, port = start_server(batching)
        try:
            warm = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            for index in range(3):
                post(warm, body_of(index))
            warm.close()
            for clients in concurrency:
                row = {"batching": batching, **load(port, clients, per_client)}
                print(f"  batching {'on ' if batching else 'off'} {clients:>3} clients: {row['requests_per_s']:.1f} req/s, "
                      f"p50 {row['p50_ms']:.0f} ms, p99 {row['p99_ms']:.0f} ms", flush=True)
                rows.append(row)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(120)
    return rows


# -- batch ----------------------------------------------------------------------------------------------


def loopback_namespace() -> str | None:
    """Why Ray cannot be kept on loopback here, or None when `unshare -n` works."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is not installed"
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        return "unshare -n failed (run as root)"
    return None


def timed_run(rows: int, folder: Path, engine: str, num_actors: int) -> float:
    source = folder / f"in-{rows}.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": f"{SENTENCES[i % len(SENTENCES)]} ({i})"}) + "\n" for i in range(rows)))
    output = folder / f"out-{engine}-{rows}.jsonl"
    output.unlink(missing_ok=True)
    command = [PYTHON, "-m", "decisionflow.cli", "run", "sentiment", "--input", str(source), "--output", str(output)]
    if engine == "ray":
        command += ["--engine", "ray", "--num-actors", str(num_actors)]
        inner = " ".join(f"'{part}'" for part in command)
        command = ["unshare", "-n", "bash", "-c", f"ip link set lo up && exec {inner}"]
    began = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{engine} run failed: {done.stderr[-2000:]}")
    decided = sum(1 for _ in output.open())
    if decided != rows:
        raise RuntimeError(f"{engine} run wrote {decided} of {rows} rows")
    return wall


def measure_batch(rows: int, num_actors: int, skip_ray: bool) -> dict:
    results: dict = {"rows": [rows, 2 * rows], "num_actors": num_actors}
    engines = ["plain"]
    why_not = "skipped (--skip-ray)" if skip_ray else loopback_namespace()
    if why_not is None:
        engines.append("ray")
    else:
        results["ray_skipped"] = why_not
    with tempfile.TemporaryDirectory() as scratch:
        for engine in engines:
            small, large = (timed_run(n, Path(scratch), engine, num_actors) for n in (rows, 2 * rows))
            results[engine] = {
                "wall_s": [small, large], "rows_per_s_end_to_end": 2 * rows / large,
                "rows_per_s_marginal": rows / (large - small) if large > small else None,
            }
            marginal = results[engine]["rows_per_s_marginal"]
            rate = f"{marginal:.1f} rows/s marginal" if marginal else "no marginal rate (2N took no longer than N)"
            print(f"  {engine:<5} {rows} rows {small:.1f} s, {2 * rows} rows {large:.1f} s: "
                  f"{2 * rows / large:.1f} rows/s end to end, {rate}", flush=True)
    return results


# -- report -----------------------------------------------------------------------------------------------


def table(serving: list[dict], batch: dict) -> str:
    lines = ["| micro-batching | clients | requests/s | p50 ms | p99 ms |", "| --- | ---: | ---: | ---: | ---: |"]
    for row in serving:
        lines.append(f"| {'on' if row['batching'] else 'off'} | {row['clients']} | {row['requests_per_s']:.1f} | "
                     f"{row['p50_ms']:.0f} | {row['p99_ms']:.0f} |")
    if batch:
        lines += ["", "| batch run | wall s (N, 2N rows) | rows/s end to end | rows/s marginal |", "| --- | --- | ---: | ---: |"]
        for engine in ("plain", "ray"):
            if engine in batch:
                result = batch[engine]
                marginal = f"{result['rows_per_s_marginal']:.1f}" if result["rows_per_s_marginal"] else "n/a"
                label = engine if engine == "plain" else f"ray ({batch['num_actors']} actors)"
                lines.append(f"| {label} | {result['wall_s'][0]:.1f}, {result['wall_s'][1]:.1f} | "
                             f"{result['rows_per_s_end_to_end']:.1f} | {marginal} |")
        if "ray_skipped" in batch:
            lines.append(f"\nray: {batch['ray_skipped']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests-per-client", type=int, default=8)
    parser.add_argument("--concurrency", default="1,8,32", help="Comma-separated client counts.")
    parser.add_argument("--rows", type=int, default=256, help="N: the batch runs decide N and 2N rows.")
    parser.add_argument("--num-actors", type=int, default=2)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-batch", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "measure_serving.json")
    args = parser.parse_args()
    from benchmarks.common import write_results

    concurrency = [int(n) for n in args.concurrency.split(",")]
    print(f"serving: {args.requests_per_client} requests per client at {concurrency} clients", flush=True)
    serving = measure_serving(args.requests_per_client, concurrency)
    batch = {} if args.skip_batch else measure_batch(args.rows, args.num_actors, args.skip_ray)
    report = {
        "workload": {"serving": {"route": "/v1/systemone", "questions": QUESTIONS, "requests_per_client": args.requests_per_client},
                     "batch": {"rubric": "sentiment", "rows": [args.rows, 2 * args.rows]}},
        "serving": serving, "batch": batch,
    }
    write_results(args.out, report)
    print()
    print(table(serving, batch))
    print(f"\nwritten to {args.out}")


if __name__ == "__main__":
    main()
