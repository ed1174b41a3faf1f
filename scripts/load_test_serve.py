"""Load-test `decisionflow serve` over loopback: prepared-rubric traffic alone, then beside a hostile stream.

    .venv/bin/python scripts/load_test_serve.py                      # 2 x 60 s, 48 + 16 clients
    .venv/bin/python scripts/load_test_serve.py --seconds 20         # shorter

One server process (bundled model, engine defaults, two API keys). Each phase lasts `--seconds` and
stops by itself:

1. quiet: `--clients` keep-alive clients (key 1) send requests of prepared rubrics as fast as they are
   answered: `/v1/rubrics/sentiment/decide` and `/v1/systemone` with one fixed question set, over a pool
   of texts whose answers were first read one at a time;
2. hostile: the same clients, plus `--hostile-clients` clients (key 2) sending a stream of new question
   sets (each one never seen before) and hostile bodies (malformed JSON, NaN, a 5,000-digit integer, a
   lone surrogate, the wrong content type, an oversized body, a wrong key, a slow body...).

Reported per phase: requests answered by status, p50/p99 latency of the prepared-rubric requests,
429/503 counts, mix-ups (a 200 whose answers lie nearer another text's answers read alone than its
own), answers moved (its own text's, probabilities more than 1e-4 away: bfloat16 rounds by what shares
a pass) and the largest such move, 500s,
tracebacks in answers, and the server's resident memory (start, peak, end). Writes
`out/load_test_serve.json`. Run it on an otherwise idle machine: latencies are wall-clock.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.serving.throughput.measure import QUESTIONS, start_server  # noqa: E402 - the serving benchmark starts servers the same way

KEYS = ("load-test-prepared-key-0001", "load-test-hostile-key-0002")
TEXTS = [
    "I was charged twice for my March invoice, please refund the duplicate",
    "my parcel has not arrived after three weeks and tracking is stuck",
    "a gorgeous, witty film with a wonderful cast",
    "dull, long and lifeless from start to end",
    "the blender came broken, I want to send it back",
    "how do I download last year's receipts",
    "your courier left the box in the rain, everything is soaked",
    "cancel my subscription and refund this month",
]


def send(connection: http.client.HTTPConnection, path: str, body: bytes, *, key: str | None,
         content_type: str = "application/json") -> tuple[int, bytes, dict[str, str]]:
    headers = {"Content-Type": content_type}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, response.read(), {k.lower(): v for k, v in response.getheaders()}


def prepared_request(index: int) -> tuple[str, bytes, int]:
    number = (index // 2) % len(TEXTS)
    text = TEXTS[number]
    if index % 2 == 0:
        return "/v1/rubrics/sentiment/decide", json.dumps({"text": text}).encode(), number
    return "/v1/systemone", json.dumps({"state": text, "questions": QUESTIONS}).encode(), number


def answers_of(path: str, body: dict) -> dict:
    """What is compared between two answers to one request: labels and probabilities."""
    if path == "/v1/systemone":
        return {qid: (a.get("choice"), a.get("noul"), a.get("score"), a.get("probabilities")) for qid, a in body["answers"].items()}
    return {name: (field["value"], field["probabilities"]) for name, field in body["fields"].items()}


EXACT = 1e-4
"""Answers this close to a text's answer read alone are the same answer (float32 gives them every time)."""


def gap(got: dict, alone: dict) -> float:
    """How far one answer is from another: the largest difference of any probability (labels follow from
    them, so a near tie flipped by rounding stays near); a label differing where no probability says why
    is infinitely far."""
    if got.keys() != alone.keys():
        return float("inf")
    largest = 0.0
    for key, answer in alone.items():
        values, probabilities = [], []
        for a, b in zip(got[key], answer):
            (probabilities if isinstance(b, (dict, float)) else values).append((a, b))
        for a, b in probabilities:
            if a is None or (isinstance(b, dict) and a.keys() != b.keys()):
                return float("inf")
            differences = [abs(a[k] - b[k]) for k in b] if isinstance(b, dict) else [abs(a - b)]
            largest = max(largest, *differences)
        if not probabilities and any(a != b for a, b in values):
            return float("inf")
    return largest


def judge(got: dict, path: str, number: int, alone: dict) -> tuple[str, float]:
    """("same" | "moved" | "mix-up", distance from the text's own answer). A mix-up is an answer nearer
    another text's answer than its own; "moved" is its own text's answer with probabilities shifted by what
    shared its pass (bfloat16 rounds a product by the batch's shape: docs/engine.md, `dtype`)."""
    own = gap(got, alone[(path, number)])
    if own <= EXACT:
        return "same", own
    nearest_other = min(gap(got, answer) for (other_path, other), answer in alone.items()
                        if other_path == path and other != number)
    return ("mix-up" if nearest_other < own else "moved"), own


def hostile_bodies() -> list[tuple[str, bytes, str, str | None]]:
    """(path, body, content type, key): requests no server should answer 500 or with a traceback."""
    prepared, hostile = KEYS
    state = json.dumps("my parcel is late")
    return [
        ("/v1/systemone", b"{not json", "application/json", hostile),
        ("/v1/systemone", b'{"state": NaN, "questions": {}}', "application/json", hostile),
        ("/v1/systemone", b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": "y"}}, "model": '
         + b"9" * 5000 + b"}", "application/json", hostile),
        ("/v1/systemone", b'{"state": "x", "questions": {"\\ud800": {"type": "noul", "instructions": "y"}}}',
         "application/json", hostile),
        ("/v1/systemone", b'{"state": ' + state.encode() + b', "questions": {"a": {"type": "noul", "instructions": "y"}}}',
         "text/plain", hostile),
        ("/v1/systemone", b'{"state": "' + b"a" * 300_000 + b'", "questions": {}}', "application/json", hostile),
        ("/v1/systemone", b"", "application/json", hostile),
        ("/v1/systemone", b"[" * 50_000 + b"]" * 50_000, "application/json", hostile),  # within the body limit
        ("/v1/systemone", b'{"state": "x", "questions": {"a": {"type": "choice", "instructions": "y", "criteria": '
         b'{"same": null, "SAME": null}}}}', "application/json", hostile),
        ("/v1/rubrics/sentiment/decide", b'{"texts": ' + json.dumps([""] * 64).encode() + b"}", "application/json", hostile),
        ("/v1/rubrics/nope/decide", b'{"text": "x"}', "application/json", hostile),
        ("/v1/systemone", b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": "y"}}}',
         "application/json", "not-a-key"),
        ("/v1/systemone", b'{"state": "x", "questions": {"a": {"type": "noul", "instructions": "y"}}}',
         "application/json", None),
    ]


RUN = uuid.uuid4().hex[:8]
"""Part of every new question set's wording: a set new to this run is new to the server's disk cache too."""


def new_question_set(number: int) -> bytes:
    questions = {
        "refund": {"type": "noul", "instructions": f"Does the customer ask for money back (variant {RUN}-{number})"},
        "mood": {"type": "choice", "instructions": f"How does the writer feel ({number})",
                 "criteria": {"calm": None, "annoyed": None, "furious": None}},
    }
    return json.dumps({"state": TEXTS[number % len(TEXTS)], "questions": questions}).encode()


def slow_body(port: int, key: str) -> int:
    """A body trickled far slower than any client sends: the server must close it (408), not hold it."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + key.encode() + b"\r\nContent-Length: 100000\r\n\r\n{")
        began = time.monotonic()
        while time.monotonic() - began < 45:
            try:
                sock.sendall(b" ")
                data = sock.recv(4096, socket.MSG_DONTWAIT)
                if data:
                    return int(data.split()[1])
            except BlockingIOError:
                pass
            except OSError:
                return 0
            time.sleep(1)
    return -1


def preparation_cost(connection: http.client.HTTPConnection, sets: int = 3) -> dict:
    """Median milliseconds of a new question set's first request (compile, prefix prefill, content-free
    reading, the decision) and of the same request once the set is prepared, one client, idle server."""
    new, prepared = [], []
    for number in range(sets):
        body = new_question_set(-1 - number)
        for times in (new, prepared):
            began = time.perf_counter()
            status, payload, _ = send(connection, "/v1/systemone", body, key=KEYS[0])
            if status != 200:
                raise SystemExit(f"preparation request failed: {status} {payload[:200]!r}")
            times.append((time.perf_counter() - began) * 1000)
    return {"sets": sets, "new_ms": round(statistics.median(new), 1), "prepared_ms": round(statistics.median(prepared), 1)}


def resident_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def phase(port: int, pid: int, seconds: float, clients: int, hostile_clients: int, alone: dict) -> dict:
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: Counter = Counter()
    hostile_statuses: Counter = Counter()
    new_set_statuses: Counter = Counter()
    problems: Counter = Counter()
    largest_move = [0.0]
    memory: list[float] = [resident_mb(pid)]
    prepared_key, hostile_key = KEYS

    def prepared_client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        index = number
        while time.monotonic() < stop_at:
            path, body, text = prepared_request(index)
            began = time.perf_counter()
            try:
                status, payload, _ = send(connection, path, body, key=prepared_key)
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                with lock:
                    problems["connection errors"] += 1
                continue
            elapsed = time.perf_counter() - began
            # Judged outside the lock: parsing and comparing an answer is the client's own work.
            verdict, distance = judge(answers_of(path, json.loads(payload)), path, text, alone) if status == 200 else (None, 0.0)
            with lock:
                statuses[status] += 1
                if status == 200:
                    latencies.append(elapsed)
                    if verdict == "mix-up":
                        problems["mix-ups"] += 1
                    elif verdict == "moved":
                        problems["moved"] += 1
                        largest_move[0] = max(largest_move[0], distance)
                if b"Traceback" in payload:
                    problems["tracebacks"] += 1
            index += clients
        connection.close()

    def hostile_client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        corpus = hostile_bodies()
        step = number
        while time.monotonic() < stop_at:
            if step % 3 == 0:
                request = ("/v1/systemone", new_question_set(number * 1_000_000 + step), "application/json", hostile_key)
            else:
                request = corpus[step % len(corpus)]
            path, body, content_type, key = request
            try:
                status, payload, _ = send(connection, path, body, key=key, content_type=content_type)
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                status, payload = 0, b""
            with lock:
                (new_set_statuses if step % 3 == 0 else hostile_statuses)[status] += 1
                if b"Traceback" in payload:
                    problems["tracebacks"] += 1
            step += hostile_clients
        connection.close()

    def watch_memory() -> None:
        while time.monotonic() < stop_at:
            time.sleep(1)
            memory.append(resident_mb(pid))

    threads = [threading.Thread(target=prepared_client, args=(i,)) for i in range(clients)]
    threads += [threading.Thread(target=hostile_client, args=(i,)) for i in range(hostile_clients)]
    threads.append(threading.Thread(target=watch_memory))
    slow: list[int] = []
    if hostile_clients:
        threads.append(threading.Thread(target=lambda: slow.append(slow_body(port, hostile_key))))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    memory.append(resident_mb(pid))
    ordered = sorted(latencies)
    return {
        "seconds": seconds, "clients": clients, "hostile_clients": hostile_clients,
        "prepared_answered": len(latencies), "prepared_statuses": dict(sorted(statuses.items())),
        "new_question_set_statuses": dict(sorted(new_set_statuses.items())),
        "hostile_body_statuses": dict(sorted(hostile_statuses.items())),
        "p50_ms": round(statistics.median(ordered) * 1000, 1) if ordered else None,
        "p99_ms": round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1) if ordered else None,
        "status_429": statuses[429] + hostile_statuses[429] + new_set_statuses[429],
        "status_503": statuses[503] + hostile_statuses[503] + new_set_statuses[503],
        "status_500": statuses[500] + hostile_statuses[500] + new_set_statuses[500], "mix_ups": problems["mix-ups"],
        "moved": problems["moved"], "largest_move": round(largest_move[0], 6),
        "tracebacks": problems["tracebacks"], "connection_errors": problems["connection errors"],
        "slow_body_status": slow[0] if slow else None,
        "memory_mb": {"start": round(memory[0]), "peak": round(max(memory)), "end": round(memory[-1])},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=48, help="prepared-rubric clients (both phases)")
    parser.add_argument("--hostile-clients", type=int, default=16, help="hostile clients (second phase)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "load_test_serve.json")
    args = parser.parse_args()
    process, port = start_server(environment={"DECISIONFLOW_API_KEYS": ",".join(KEYS)})
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        alone = {}
        for index in range(2 * len(TEXTS)):
            path, body, text = prepared_request(index)
            status, payload, _ = send(connection, path, body, key=KEYS[0])
            if status != 200:
                raise SystemExit(f"warm-up request failed: {status} {payload[:200]!r}")
            alone[(path, text)] = answers_of(path, json.loads(payload))
        preparation = preparation_cost(connection)
        connection.close()
        print(f"server on port {port}; {len(alone)} reference answers read one at a time; "
              f"a new question set's first request {preparation['new_ms']} ms, prepared {preparation['prepared_ms']} ms",
              flush=True)
        results: dict = {"preparation": preparation}
        for name, hostile in (("quiet", 0), ("hostile", args.hostile_clients)):
            print(f"phase {name}: {args.clients} prepared + {hostile} hostile clients for {args.seconds:g} s", flush=True)
            results[name] = phase(port, process.pid, args.seconds, args.clients, hostile, alone)
            print(json.dumps(results[name]), flush=True)
    finally:
        process.terminate()
        process.wait(60)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
