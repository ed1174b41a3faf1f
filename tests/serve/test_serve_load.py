"""32 concurrent clients on a real server: each gets back exactly the answers of its request sent alone."""

from __future__ import annotations

import threading

import pytest
from serve_client import Client, rubric_folder, server_port  # noqa: F401 - fixtures

pytestmark = pytest.mark.model

CLIENTS = 32
ROUNDS = 2
SENTENCES = [
    "I was charged twice for my March invoice, please refund one charge",
    "my parcel has not arrived after three weeks",
    "a gorgeous, witty film",
    "dull, long and lifeless",
    "the package came broken and I want my money back",
    "where can I download my receipt",
    "the cast is wonderful but the plot drags",
    "tracking says delivered but nothing is here",
]
SPAM = {"spam": {"type": "noul", "instructions": "Is the message spam"},
        "topic": {"type": "choice", "instructions": "What is it about", "criteria": {"money": None, "delivery": None, "film": None}}}
URGENCY = {"urgency": {"type": "score", "instructions": "How urgent is it", "criteria": ["not urgent", "soon", "today"]},
           "refund?": {"type": "noul", "instructions": "Does the writer want money back", "criteria": {"true": "a refund is asked"}}}


def request_of(index: int) -> tuple[str, dict]:
    """Four kinds of request over distinct texts, so a mixed-up answer cannot pass for the right one."""
    text = f"{SENTENCES[index % len(SENTENCES)]} (message {index})"
    kind = index % 4
    if kind == 0:
        return "/v1/systemone", {"state": text, "questions": SPAM}
    if kind == 1:
        return "/v1/systemone", {"state": text, "questions": URGENCY}
    if kind == 2:
        return "/v1/rubrics/sentiment/decide", {"text": text}
    return "/v1/rubrics/tickets/decide", {"texts": [text, f"{SENTENCES[(index + 3) % len(SENTENCES)]} (also {index})"]}


def distributions(body: dict) -> dict:
    """Every answer of a reply with its probabilities: what must match between two replies."""
    if "answers" in body:
        return {qid: (answer.get("choice"), answer.get("noul"), answer.get("score"), answer.get("probabilities"))
                for qid, answer in body["answers"].items()}
    decisions = body["results"] if "results" in body else [body]
    return {f"{i}.{name}": (field["value"], field["probabilities"])
            for i, decision in enumerate(decisions) for name, field in decision["fields"].items()}


def assert_same_answers(got: dict, alone: dict) -> None:
    got_answers, alone_answers = distributions(got), distributions(alone)
    assert list(got_answers) == list(alone_answers)
    for key, answer in alone_answers.items():
        labels, probabilities = got_answers[key][:-1], got_answers[key][-1]
        assert labels[0] == answer[0], f"{key}: {labels} != {answer[:-1]}"
        for got_number, alone_number in zip(labels[1:], answer[1:-1]):
            assert got_number == pytest.approx(alone_number, abs=1e-5)
        if answer[-1] is not None:
            assert probabilities == pytest.approx(answer[-1], abs=1e-5), key


def test_32_concurrent_clients_each_get_their_own_answers(server_port):
    requests = [request_of(i) for i in range(CLIENTS)]
    solo = Client(server_port)
    alone = []
    for path, body in requests:
        reply = solo.post(path, body)
        assert reply.status == 200, reply.body
        alone.append(reply.body)
    solo.close()

    replies: list[list] = [[] for _ in range(CLIENTS)]
    failures: list[BaseException] = []
    start = threading.Barrier(CLIENTS)

    def client_loop(index: int) -> None:
        client = Client(server_port)
        try:
            start.wait(60)
            for _ in range(ROUNDS):
                replies[index].append(client.post(*requests[index]))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            failures.append(error)
        finally:
            client.close()

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not failures, failures[:3]
    batch_sizes = []
    for index in range(CLIENTS):
        assert len(replies[index]) == ROUNDS
        for reply in replies[index]:
            assert reply.status == 200, reply.body
            assert_same_answers(reply.body, alone[index])
            for decision in reply.body.get("results", [reply.body]):
                if "stats" in decision:
                    batch_sizes.append(decision["stats"]["batch_size"])
    assert max(batch_sizes) > 1, "concurrent requests were never decided together"
