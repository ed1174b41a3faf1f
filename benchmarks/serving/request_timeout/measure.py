"""What a request's deadline must allow, and what stopping the work of a request that is over buys.

    bash benchmarks/serving/request_timeout/run.sh                         # both sides, each from a worktree of its commit
    .venv/bin/python -m benchmarks.serving.request_timeout.measure --out x.json      # this checkout only

One server in this process on a loopback port: the bundled model in its default number format, the shipped
rubrics, `ServeSettings` defaults but no deadline (so nothing measured is cut short) and a budget of new question
sets large enough for every set sent; no head store on disk, so every new question set is prefilled.

- `slowest`: the slowest requests the limits admit. The first request of a new 32-question `/v1/systemone` set
  (the most a request may ask) of two labels each, a prompt of about 1,830 tokens before the input (at most 2,048
  are admitted): compiled, its head prefilled, its content-free prior read, then decided. Then a full micro-batch
  of it: concurrent requests whose new tokens fill `--batch-tokens`. Wall time of each request.
- `abandoned`: a prepared request's latency (a three-question set) alone, and sent the moment another client
  leaves a new 32-question set whose first call has begun on the model thread: it waits behind what the model
  still does for nobody. With the work of a request that is over stopped, that is the rest of the head prefill
  under way; without, the whole preparation (prefill, content-free reading) and the set's own pass.

Timings need an otherwise idle machine; the load average before and after is written with the results.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

PREPARED = {
    "state": "I was charged twice for my March invoice, please refund the duplicate.",
    "questions": {
        "refund": {"type": "noul", "instructions": "Does the customer ask for money back"},
        "team": {"type": "choice", "instructions": "Which team handles it",
                 "criteria": {"billing": "charges and invoices", "shipping": "delivery and parcels",
                              "returns": "sending goods back"}},
        "urgency": {"type": "score", "instructions": "How urgent it is", "criteria": ["can wait", "this week", "today"]},
    },
}
STATE = "My parcel never arrived and I was charged twice for it; I want the money back today or I cancel."


def large_question_set(state: str = STATE) -> dict[str, Any]:
    """32 choice questions (the most a request may ask), a prompt of about 1,800 tokens before the input."""
    word = uuid.uuid4().hex[:8]  # a set no engine has prepared
    return {"state": state, "questions": {
        f"q{i:02d}": {"type": "choice", "instructions": f"Which kind of issue {i} the message raises"
                      + (f" ({word})" if i == 0 else ""),
                      "criteria": {f"kind_{j}": f"issue of kind {j}" for j in range(2)}}
        for i in range(32)}}


def post(port: int, body: dict[str, Any]) -> tuple[int, float]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    began = time.perf_counter()
    connection.request("POST", "/v1/systemone", body=json.dumps(body), headers={"Content-Type": "application/json"})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, time.perf_counter() - began


def scrape(port: int, prefix: str) -> float:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    connection.close()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(prefix))


def slowest(engine: Any, port: int) -> dict[str, Any]:
    from decisionflow.serve.settings import Batching, Limits
    from decisionflow.serve.systemone import build_question_set, parse_request

    body = large_question_set()
    compiled = engine.prepared.compile(build_question_set(parse_request(body, Limits()).questions).rubric)
    status, first = post(port, body)
    assert status == 200, status
    rows = sum(f.row_length + max(map(len, f.answer_lines)) for f in compiled.fields.values())
    per_input = len(compiled.request_tokens(STATE)) + rows
    clients = max(1, Batching().token_budget // per_input)
    results: list[tuple[int, float]] = []
    threads = [threading.Thread(target=lambda: results.append(post(port, body))) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(status == 200 for status, _ in results), results
    return {"head_tokens": len(compiled.prefix_tokens), "new_set_first_request_s": round(first, 2),
            "micro_batch": {"requests": clients, "tokens_per_request": per_input,
                            "slowest_s": round(max(s for _, s in results), 2)}}


def health(port: int) -> dict[str, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request("GET", "/healthz")
    body = json.loads(connection.getresponse().read())
    connection.close()
    return body


def until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 600
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not happen within 600 s")
        time.sleep(0.005)


def abandoned(port: int, repeats: int) -> dict[str, Any]:
    """A prepared request sent the moment another client leaves a new 32-question set whose first call has
    begun on the model thread (its head prefill), `repeats` times from an idle model; and the same request alone."""
    assert post(port, PREPARED)[0] == 200  # prepared before anything is timed
    alone = [post(port, PREPARED)[1] for _ in range(repeats)]
    behind = []
    for _ in range(repeats):
        data = json.dumps(large_question_set()).encode()
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(f"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        until(lambda: health(port)["model_busy_s"] > 0, "the new set's first call beginning")
        sock.close()
        status, seconds = post(port, PREPARED)
        assert status == 200, status
        behind.append(seconds)
        until(lambda: (lambda h: h["model_busy_s"] == 0 and h["queue_depth"] == 0)(health(port)), "the model going idle")
    stopped = scrape(port, "decisionflow_stopped_total")  # 0 where the metric does not exist (earlier code)
    return {"repeats": repeats, "alone_p50_s": round(statistics.median(alone), 3),
            "behind_abandoned_p50_s": round(statistics.median(behind), 3), "behind_abandoned_max_s": round(max(behind), 3),
            "behind_abandoned_s": [round(s, 2) for s in behind], "work_stopped": stopped}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="slowest,abandoned")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    import decisionflow
    from decisionflow.runtime.engine import Engine
    from decisionflow.serve import RubricRegistry, ServeSettings, create_app
    from decisionflow.serve.server import serving_in_thread
    from decisionflow.serve.settings import Limits

    engine = Engine.load(persist_prefixes=False)
    app = create_app(engine, RubricRegistry.from_folder(),
                     ServeSettings(limits=Limits(request_timeout_s=None, new_question_set_burst=1000)))
    checkout = Path(decisionflow.__file__).resolve().parents[1]
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()
    results: dict[str, Any] = {"commit": commit or "unknown", "dtype": str(engine.backend.dtype),
                               "load_average": os.getloadavg()}
    with serving_in_thread(app) as port:
        for part in args.parts.split(","):
            began = time.perf_counter()
            results[part] = slowest(engine, port) if part == "slowest" else abandoned(port, args.repeats)
            print(part, json.dumps(results[part]), f"({time.perf_counter() - began:.0f} s)", flush=True)
    results["load_average_after"] = os.getloadavg()
    from benchmarks.common import write_results

    write_results(args.out, results)


if __name__ == "__main__":
    main()
