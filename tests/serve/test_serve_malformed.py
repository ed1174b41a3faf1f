"""Malformed and hostile requests: each is a clear 4xx (a JSON error from the app, or uvicorn's own 400 for
what is not HTTP), never a 500, never a 200, never a traceback; and the server answers well afterwards."""

from __future__ import annotations

import json
import socket

import pytest
from serve_client import Client, rubric_folder, running_server  # noqa: F401 - fixtures

from decisionflow.serve import Limits, ServeSettings

pytestmark = pytest.mark.model

OK = '{"type": "noul", "instructions": "Is it about money"}'
CHOICE = '{"type": "choice", "instructions": "Which team", "criteria": %s}'


def systemone(state: str = '"refund please"', questions: str = '{"q": %s}' % OK, extra: str = "") -> bytes:
    return ('{"state": %s, "questions": %s%s}' % (state, questions, extra)).encode()


@pytest.fixture(scope="module")
def port(engine, rubric_folder):
    with running_server(engine, rubric_folder, ServeSettings(limits=Limits(body_timeout_s=1.0))) as bound:
        yield bound


@pytest.fixture
def client(port):
    connection = Client(port)
    yield connection
    connection.close()


# -- the four measured cases -------------------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_question_id_is_a_located_422(client):
    reply = client.post("/v1/systemone", raw=systemone(questions='{"\\ud800": %s}' % OK))
    assert reply.status == 422, reply.body
    error = reply.body["error"]
    assert error["type"] == "RubricError" and error["field"] == 'questions["\\ud800"]'
    assert "lone surrogate (U+D800)" in error["message"]


@pytest.mark.parametrize("digits", [4301, 5000, 20000])
def test_a_huge_integer_literal_is_a_400_about_the_body(client, digits):
    reply = client.post("/v1/systemone", raw=systemone(state='{"n": %s}' % ("7" * digits)))
    assert reply.status == 400, reply.body
    assert reply.body["error"]["field"] == "body" and f"{digits} digits" in reply.body["error"]["message"]


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e400", "-1e999"])
def test_nan_infinity_and_overflowing_numbers_are_not_json(client, literal):
    reply = client.post("/v1/systemone", raw=systemone(state='{"n": %s}' % literal))
    assert reply.status == 400, reply.body
    assert reply.body["error"]["type"] == "DataError" and reply.body["error"]["field"] == "body"
    reply = client.post("/v1/rubrics/tickets/decide", raw=('{"texts": ["a", {"n": [%s]}]}' % literal).encode())
    assert reply.status == 400, reply.body


def test_a_rubric_route_decides_the_inputs_the_systemone_route_does(client):
    """A string, an object or a conversation; `text` holding a list of strings (meant as `texts`), a number
    or a boolean is refused naming `text`, as /v1/systemone refuses it in `state`."""
    reply = client.post("/v1/rubrics/tickets/decide", {"text": ["a gorgeous film", "a dull film"]})
    assert reply.status == 400, reply.body
    error = reply.body["error"]
    assert error["type"] == "DataError" and error["field"] == "text"
    assert error["message"] == ("an input must be a string, an object or a list (a conversation of {role, content} "
                                "messages, or structured data), got a list of 2 strings; for several inputs, give `texts`")
    for value, what in ((5, "a number"), (True, "a boolean")):
        reply = client.post("/v1/rubrics/tickets/decide", {"text": value})
        assert reply.status == 400 and reply.body["error"]["message"].endswith(f"got {what}"), reply.body
        state = client.post("/v1/systemone", raw=systemone(state=json.dumps(value)))
        assert state.status == 400 and state.body["error"]["message"].endswith(f"got {what}"), state.body
    reply = client.post("/v1/rubrics/tickets/decide", {"texts": ["I was charged twice", 7]})
    assert reply.status == 200, reply.body
    good, bad = reply.body["results"]
    assert "fields" in good and bad["error"]["field"] == "texts[1]" and bad["error"]["message"].endswith("got a number")
    conversation = [{"role": "user", "content": "I was charged twice"}]
    assert client.post("/v1/rubrics/tickets/decide", {"text": conversation}).status == 200
    # Structured data is an input, as for `run --input`; a malformed conversation is the engine's to name.
    assert client.post("/v1/rubrics/tickets/decide", {"text": [{"sku": "A1", "qty": 2}]}).status == 200
    broken = client.post("/v1/rubrics/tickets/decide", {"text": [{"role": "user", "content": "hi"}, "oops"]})
    assert broken.status == 422 and "'oops'" in broken.body["error"]["message"], broken.body


def test_a_text_plain_body_is_a_415(client):
    reply = client.post("/v1/systemone", raw=systemone(), headers={"Content-Type": "text/plain"})
    assert reply.status == 415 and reply.body["error"]["type"] == "UnsupportedMediaType"


def test_a_4300_digit_integer_and_finite_numbers_are_still_read(client):
    from decisionflow.serve.body import parse_json

    parsed = parse_json(('{"n": %s, "m": -%s, "x": -1.5e300, "y": 1e-400}' % ("9" * 4300, "9" * 4300)).encode())
    assert parsed == {"n": int("9" * 4300), "m": -int("9" * 4300), "x": -1.5e300, "y": 0.0}
    assert client.post("/v1/systemone", raw=systemone(state='{"price": 12.5, "count": 3}')).status == 200


# -- a corpus of hostile requests ----------------------------------------------------------------------------------


DEEP_ARRAY = b'{"state": ' + b"[" * 50000 + b"]" * 50000 + b', "questions": {"q": ' + OK.encode() + b"}}"
DEEP_OBJECT = b'{"state": ' + b'{"a": ' * 15000 + b"1" + b"}" * 15000 + b', "questions": {"q": ' + OK.encode() + b"}}"
HOSTILE_BODIES = {
    "surrogate question id": ("/v1/systemone", systemone(questions='{"\\udfff": %s}' % OK), {}),
    "surrogate instructions": ("/v1/systemone", systemone(questions='{"q": {"type": "noul", "instructions": "a\\ud800"}}'), {}),
    "surrogate label": ("/v1/systemone", systemone(questions='{"q": %s}' % (CHOICE % '{"\\ud800": null, "b": null}')), {}),
    "surrogate label description": ("/v1/systemone", systemone(questions='{"q": %s}' % (CHOICE % '{"a": "\\ud800", "b": null}')), {}),
    "surrogate score level": ("/v1/systemone", systemone(
        questions='{"q": {"type": "score", "instructions": "How bad", "criteria": ["low", "\\udc00"]}}'), {}),
    "surrogate noul criterion key": ("/v1/systemone", systemone(
        questions='{"q": {"type": "noul", "instructions": "a", "criteria": {"\\ud800": "x"}}}'), {}),
    "surrogate state": ("/v1/systemone", systemone(state='"refund \\ud800"'), {}),
    "surrogate state key": ("/v1/systemone", systemone(state='{"\\ud800": 1}'), {}),
    "surrogate top-level key": ("/v1/systemone", systemone(extra=', "\\ud800": 1'), {}),
    "surrogate model": ("/v1/systemone", systemone(extra=', "model": "\\ud800"'), {}),
    "surrogate text": ("/v1/rubrics/tickets/decide", b'{"text": "\\ud83d"}', {}),
    "surrogate key on a rubric route": ("/v1/rubrics/tickets/decide", b'{"\\ud800": "x"}', {}),
    "surrogate repeated key": ("/v1/systemone", systemone(state='{"\\ud800": 1, "\\ud800": 2}'), {}),
    "huge negative integer in texts": ("/v1/rubrics/tickets/decide", ('{"texts": [-%s]}' % ("1" * 6000)).encode(), {}),
    "huge integer as a label description": ("/v1/systemone", systemone(
        questions='{"q": %s}' % (CHOICE % ('{"a": %s, "b": null}' % ("3" * 5000)))), {}),
    "NaN as a question": ("/v1/systemone", systemone(questions='{"q": NaN}'), {}),
    "no content type": ("/v1/systemone", systemone(), {"Content-Type": None}),
    "form content type": ("/v1/rubrics/tickets/decide", b"text=refund", {"Content-Type": "application/x-www-form-urlencoded"}),
    "latin-1 charset": ("/v1/systemone", systemone(), {"Content-Type": "application/json; charset=latin-1"}),
    "invalid UTF-8": ("/v1/systemone", b'{"state": "\xff\xfe refund", "questions": {}}', {}),
    "UTF-8 byte order mark": ("/v1/systemone", b"\xef\xbb\xbf" + systemone(), {}),
    "UTF-16 body": ("/v1/systemone", systemone().decode().encode("utf-16"), {}),
    "deeply nested arrays": ("/v1/systemone", DEEP_ARRAY, {}),
    "deeply nested objects": ("/v1/systemone", DEEP_OBJECT, {}),
    "NUL characters": ("/v1/systemone", systemone(state='"\\u0000\\u0000"', questions='{"\\u0000": %s}' % OK), {}),
    "NUL in a label": ("/v1/systemone", systemone(questions='{"q": %s}' % (CHOICE % '{"a\\u0000": null, "b": null}')), {}),
    "a 60,000-character question id": ("/v1/systemone", systemone(questions='{"%s": %s}' % ("é" * 20000, OK)), {}),
    "type as an object": ("/v1/systemone", systemone(questions='{"q": {"type": {"a": [1]}, "instructions": "x"}}'), {}),
    "garbage texts": ("/v1/rubrics/tickets/decide", b'{"texts": [null, 1, [], {}, true, [[["x"]]], ""]}', {}),
    "a conversation of garbage": ("/v1/systemone", systemone(
        state=json.dumps([{"role": i, "content": [i]} for i in range(500)])), {}),
    "model as an object": ("/v1/systemone", systemone(extra=', "model": {"x": 1}'), {}),
    "a JSON string body": ("/v1/systemone", b'"hello"', {}),
    "a JSON null body": ("/v1/rubrics/tickets/decide", b"null", {}),
    "a lone number body": ("/v1/rubrics/tickets/decide", b"1" * 5000, {}),
    "trailing garbage": ("/v1/systemone", systemone() + b"}}}", {}),
    "an invalid UTF-8 rubric name": ("/v1/rubrics/%ED%A0%80%FF/decide", b'{"text": "x"}', {}),
    "a path-traversing rubric name": ("/v1/rubrics/..%2F..%2Fetc%2Fpasswd/decide", b'{"text": "x"}', {}),
    "a request id of non-ASCII bytes": ("/v1/rubrics/tickets/decide", b'{"text": "x"}', {"X-Request-ID": "r\u00e9q\u00fc\u00eb\u00df\u00e9"}),
    "a stray authorization header": ("/v1/rubrics/nope/decide", b"{}", {"Authorization": "Bearer \u00ff\u00fe"}),
    "over the body limit": ("/v1/systemone", systemone(state=json.dumps("a" * 200_000)), {}),
}


# Hostile but well-formed: a long id, an odd request id, per-input errors inside a 200 `results`, an ignored
# `model`. Every other body of the corpus is malformed and must be refused.
MAY_BE_ANSWERED = {"a 60,000-character question id", "a request id of non-ASCII bytes", "garbage texts", "surrogate model"}


def test_no_hostile_body_gets_a_500_or_a_traceback_and_no_malformed_one_a_200(client, port):
    assert len(HOSTILE_BODIES) >= 30
    answered = {}
    for name, (path, raw, headers) in HOSTILE_BODIES.items():
        try:
            reply = client.post(path, raw=raw, headers=headers)
        except Exception as error:  # noqa: BLE001 - the connection was cut: reported below
            reply, client = error, Client(port)
        answered[name] = reply
    cut = {name: reply for name, reply in answered.items() if isinstance(reply, Exception)}
    assert not cut, cut
    statuses = {name: reply.status for name, reply in answered.items()}
    assert not [name for name, status in statuses.items() if status >= 500], statuses
    assert all(400 <= status < 500 for name, status in statuses.items() if name not in MAY_BE_ANSWERED), statuses
    for name, reply in answered.items():
        text = json.dumps(reply.body) if not isinstance(reply.body, str) else reply.body
        assert "Traceback" not in text and 'File "' not in text, name
        assert "x-request-id" in reply.headers, name
        if reply.status >= 400:
            error = reply.body["error"]
            assert error["status"] == reply.status and error["message"] and error["type"], name
        else:
            assert {"answers", "value", "results"} & set(reply.body), name
    assert client.post("/v1/rubrics/tickets/decide", {"text": "refund please"}).status == 200


# -- hostile at the HTTP level ----------------------------------------------------------------------------------------


def exchange(port: int, data: bytes) -> bytes:
    """What the server answers to `data` sent as is, until it closes the connection (every request says
    `Connection: close`; or 5 s pass). The connection is never half-closed: uvicorn takes that for a client
    gone. A reset once the answer has come (the server closed with bytes of ours unread) ends it like a close."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        try:
            sock.sendall(data)
        except OSError:  # answered and closed before everything was sent
            pass
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            received += chunk
        return received
    finally:
        sock.close()


def post(path: str, body: bytes, *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: x", "Connection: close", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


HOSTILE_EXCHANGES = {
    "a Content-Length larger than the body": (post("/v1/systemone", b'{"state": ', "Content-Type: application/json",
                                                   "Content-Length: 500"), b"408"),
    "a chunked body over the limit": (post("/v1/systemone", b"".join(b"10000\r\n" + b"a" * 0x10000 + b"\r\n" for _ in range(4))
                                           + b"0\r\n\r\n", "Content-Type: application/json", "Transfer-Encoding: chunked"),
                                      b"413"),
    "a Content-Length that is no number": (post("/v1/systemone", b"{}", "Content-Type: application/json",
                                                "Content-Length: -5"), b"400"),
    "two Content-Lengths": (post("/v1/systemone", b"{}", "Content-Type: application/json", "Content-Length: 2",
                                 "Content-Length: 3"), b"400"),
    "a garbage request line": (b"\x00\x01\x02 GARBAGE\r\n\r\n", b"400"),
    "a request id of raw high bytes": (post("/v1/rubrics/tickets/decide", b"{}", "Content-Type: application/json",
                                            "Content-Length: 2") .replace(b"Host: x", b"Host: x\r\nX-Request-ID: \xff\xfe"),
                                       b"400"),
    "a PUT": (post("/v1/systemone", b"{}", "Content-Type: application/json", "Content-Length: 2").replace(b"POST", b"PUT", 1),
              b"405"),
}


@pytest.mark.parametrize("case", list(HOSTILE_EXCHANGES))
def test_hostile_http_gets_a_4xx_and_never_a_traceback(port, case):
    data, expected = HOSTILE_EXCHANGES[case]
    received = exchange(port, data)
    status = received.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 4"), received[:300]
    assert expected in status, received[:300]
    assert b"Traceback" not in received and b"500" not in status
    assert b"x-request-id" in received.lower() or b"Invalid HTTP" in received  # the app's answers carry an id
    after = Client(port)
    assert after.get("/healthz").status == 200
    after.close()
