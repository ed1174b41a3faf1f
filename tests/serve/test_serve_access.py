"""Who may use a server: API keys (Bearer, compared in constant time), open or guarded probes and metrics,
JSON-only bodies, no API docs unless asked, a served model name that never shows a local path, 404s that
list nothing, CORS only for the origins named; and the command's flags that set all of it."""

from __future__ import annotations

import hmac

import pytest
from serve_client import Client, metric, rubric_folder, running_app, running_server, stand_in_engine  # noqa: F401 - fixtures
from typer.testing import CliRunner

from decisionflow.cli import app as cli_app
from decisionflow.serve import Access, Batching, ServeSettings
from decisionflow.serve.app import _KeyGuard, public_model_name

runner = CliRunner()
KEYS = ("key-one-7f3a9c", "key-two-41bd02")
ORIGIN = "https://app.example"
SPAM = {"spam": {"type": "noul", "instructions": "Is the message spam"}}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def guarded(engine, rubric_folder):
    """One server for the module: two keys, CORS for one origin, a served model name."""
    settings = ServeSettings(access=Access(api_keys=KEYS, cors_origins=(ORIGIN,)), served_model_name="judge-1")
    with running_server(engine, rubric_folder, settings) as port:
        yield port


@pytest.fixture
def client(guarded):
    connection = Client(guarded)
    yield connection
    connection.close()


# -- the key ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("headers, says", [
    ({}, "needs an API key"),
    (bearer("key-one-7f3a9d"), "not valid"),
    (bearer(KEYS[0][:-1]), "not valid"),
    (bearer(KEYS[0] + "x"), "not valid"),
    ({"Authorization": f"Basic {KEYS[0]}"}, "not valid"),
    ({"Authorization": KEYS[0]}, "not valid"),
    ({"Authorization": "Bearer"}, "not valid"),
    ({"Authorization": "Bearer "}, "not valid"),
])
def test_a_missing_or_wrong_key_is_a_json_401_on_every_api_route(client, headers, says):
    for method, path in (("POST", "/v1/systemone"), ("POST", "/v1/rubrics/tickets/decide"), ("GET", "/v1/rubrics"),
                         ("GET", "/v1/models"), ("POST", "/v1/rubrics/nope/decide"), ("GET", "/v1/nothing")):
        body = {"state": "x", "questions": SPAM} if method == "POST" else None
        reply = client.request(method, path, body, headers=headers)
        assert reply.status == 401, (path, reply.body)
        assert reply.headers["www-authenticate"] == "Bearer"
        error = reply.body["error"]
        if path == "/v1/models":  # the listing the openai SDK reads answers in OpenAI's shape
            assert error["type"] == "authentication_error" and error["code"] == "invalid_api_key"
        else:
            assert error["type"] == "Unauthorized" and error["status"] == 401
        assert says in error["message"]
        assert KEYS[0] not in str(reply.body) and KEYS[1] not in str(reply.body)


def test_either_key_is_accepted_and_the_answer_is_the_models(client, engine):
    for key in KEYS:
        reply = client.post("/v1/rubrics/tickets/decide", {"text": "refund my duplicate charge"}, headers=bearer(key))
        assert reply.status == 200, reply.body
        assert set(reply.body["value"]) == {"refund", "team"}
    lower = client.post("/v1/systemone", {"state": "win a free prize now", "questions": SPAM},
                        headers={"Authorization": f"bearer {KEYS[1]}"})  # the scheme's case does not matter
    assert lower.status == 200, lower.body
    assert 0.0 < lower.body["answers"]["spam"]["noul"] < 1.0


def test_probes_and_metrics_are_open_by_default(client):
    for path in ("/healthz", "/readyz", "/metrics"):
        assert client.get(path).status == 200, path


def test_refusals_for_the_key_are_counted_by_route_and_type(client):
    before = metric(client, 'decisionflow_errors_total{route="/v1/rubrics/{name}/decide",status="401",type="Unauthorized"}')
    client.post("/v1/rubrics/tickets/decide", {"text": "x"})
    after = metric(client, 'decisionflow_errors_total{route="/v1/rubrics/{name}/decide",status="401",type="Unauthorized"}')
    assert after == before + 1


def test_every_key_is_compared_every_time_in_constant_time(monkeypatch):
    compared = []
    real = hmac.compare_digest
    monkeypatch.setattr(hmac, "compare_digest", lambda a, b: compared.append((len(a), len(b))) or real(a, b))
    guard = _KeyGuard(app=None, keys=("a" * 40, "b", "c" * 7), open_paths=frozenset())
    assert guard._accepts([(b"authorization", b"Bearer b")]) == 1  # the second key: its budget is its own
    assert guard._accepts([(b"authorization", b"Bearer " + b"a" * 39)]) is False
    assert guard._accepts([]) is None
    assert compared == [(32, 32)] * 6  # digests of equal length: every key, every time, whatever the match


# -- content type, docs, model name, 404s ---------------------------------------------------------------------


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded", "application/xml",
                                          "application/json; charset=latin-1", "multipart/form-data; boundary=x",
                                          "application/jsonx"])
def test_a_body_that_is_not_sent_as_json_is_a_415(client, content_type):
    raw = b'{"state": "x", "questions": {"spam": {"type": "noul", "instructions": "Is it spam"}}}'
    reply = client.post("/v1/systemone", raw=raw, headers={**bearer(KEYS[0]), "Content-Type": content_type})
    assert reply.status == 415, reply.body
    assert reply.body["error"]["type"] == "UnsupportedMediaType" and reply.body["error"]["field"] == "body"
    charset_named = "with no charset but utf-8 (JSON is UTF-8)" in reply.body["error"]["message"]
    assert charset_named == (content_type == "application/json; charset=latin-1")


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8", "Application/JSON", 'application/json;charset="UTF-8"'])
def test_json_with_its_charset_or_in_any_case_is_accepted(client, content_type):
    reply = client.post("/v1/rubrics/tickets/decide", {"text": "where is my parcel"},
                        headers={**bearer(KEYS[0]), "Content-Type": content_type})
    assert reply.status == 200, reply.body


def test_api_docs_are_off_by_default(client):
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        reply = client.get(path, headers=bearer(KEYS[0]))
        assert reply.status == 404, path


def test_the_served_model_name_is_what_answers_and_the_model_list_say(client):
    reply = client.post("/v1/systemone", {"state": "cheap pills", "questions": SPAM}, headers=bearer(KEYS[0]))
    assert reply.status == 200 and reply.body["model"] == "judge-1"
    models = client.get("/v1/models", headers=bearer(KEYS[0]))
    assert models.status == 200
    assert models.body == {"object": "list", "data": [{"id": "judge-1", "object": "model", "owned_by": "decisionflow"}]}
    assert client.get("/healthz").body["model"] == "judge-1"


@pytest.mark.parametrize("name, public", [
    ("/home/me/models/judge.gguf", "judge.gguf"),
    ("~/models/judge-folder", "judge-folder"),
    ("./models/judge", "judge"),
    ("models/sub/judge", "judge"),
    ("C:\\models\\judge.gguf", "judge.gguf"),
    ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct"),
    ("bundled:SmolLM2-135M-Instruct.Q4_1.gguf", "bundled:SmolLM2-135M-Instruct.Q4_1.gguf"),
])
def test_a_local_model_path_is_never_shown_to_clients(name, public):
    assert public_model_name(name) == public


def test_an_unknown_rubric_is_a_404_that_lists_nothing(client):
    reply = client.post("/v1/rubrics/nope/decide", {"text": "x"}, headers=bearer(KEYS[0]))
    assert reply.status == 404 and reply.body["error"]["field"] == "name"
    assert "sentiment" not in reply.body["error"]["message"] and "tickets" not in reply.body["error"]["message"]
    assert "/v1/rubrics" in reply.body["error"]["message"]


# -- CORS ------------------------------------------------------------------------------------------------------


def test_cors_answers_the_named_origin_only(client):
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    reply = client.request("OPTIONS", "/v1/systemone", headers=preflight)  # a browser's preflight carries no key
    assert reply.status == 200, reply.body
    assert reply.headers["access-control-allow-origin"] == ORIGIN
    other = client.request("OPTIONS", "/v1/systemone", headers={**preflight, "Origin": "https://evil.example"})
    assert other.status == 400 and "access-control-allow-origin" not in other.headers
    answer = client.get("/v1/models", headers={**bearer(KEYS[0]), "Origin": ORIGIN})
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in answer.headers["access-control-expose-headers"].lower()


def test_without_cors_origins_no_cors_header_is_sent(engine, rubric_folder):
    with running_server(engine, rubric_folder) as port:
        client = Client(port)
        reply = client.get("/v1/models", headers={"Origin": ORIGIN})
        assert reply.status == 200  # no keys: open
        assert not [name for name in reply.headers if name.startswith("access-control")]
        preflight = client.request("OPTIONS", "/v1/systemone", headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        assert preflight.status == 405
        client.close()


# -- guarded probes and metrics, docs on -------------------------------------------------------------------------


def test_probes_metrics_and_docs_can_be_put_behind_the_key(rubric_folder):
    settings = ServeSettings(access=Access(api_keys=KEYS, protect_health=True, protect_metrics=True, docs=True))
    with running_server(stand_in_engine(), rubric_folder, settings) as port:
        client = Client(port)
        for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
            assert client.get(path).status == 401, path
            assert client.get(path, headers=bearer(KEYS[1])).status == 200, path
        assert "/v1/systemone" in client.get("/openapi.json", headers=bearer(KEYS[0])).body["paths"]
        client.close()


# -- the command's flags ------------------------------------------------------------------------------------------


def served_app(monkeypatch, engine, *args: str, env: dict[str, str] | None = None):
    """`decisionflow serve --port 0 ARGS` with `engine` as the loaded model: (result, the app it would serve)."""
    apps = []

    def serve(app, sock, *, on_started=None, **_):
        apps.append(app)
        on_started()
        sock.close()

    monkeypatch.setattr("decisionflow.cli.serve.load_engine", lambda *a, **k: engine)
    monkeypatch.setattr("decisionflow.serve.server.serve", serve)
    result = runner.invoke(cli_app, ["serve", "--port", "0", *args], env=env or {})
    return result, (apps[0] if apps else None)


def test_keys_come_from_the_flag_and_the_environment(monkeypatch, rubric_folder):
    result, app = served_app(monkeypatch, stand_in_engine(), "--rubrics", str(rubric_folder), "--api-key", "from-flag-1",
                             "--api-key", "from-flag-2", env={"DECISIONFLOW_API_KEYS": " from-env-1 ,from-env-2,,"})
    assert result.exit_code == 0, result.output
    access = app.state.service.settings.access
    assert access.api_keys == ("from-flag-1", "from-flag-2", "from-env-1", "from-env-2")
    assert not access.protect_health and not access.protect_metrics and not access.docs and access.cors_origins == ()
    assert "from-flag-1" not in result.output and "from-env-1" not in result.output


@pytest.mark.parametrize("key", ["two words", "tab\tkey", "ключ", "bell\x07"])
def test_a_key_that_is_not_one_printable_token_is_refused_without_being_shown(monkeypatch, rubric_folder, key):
    result, app = served_app(monkeypatch, stand_in_engine(), "--rubrics", str(rubric_folder), "--api-key", "good-key",
                             "--api-key", key)
    assert result.exit_code == 2 and app is None
    assert result.output.startswith("error: API key 2 of 2") and key not in result.output


def test_the_flags_reach_the_app_and_batch_tokens_reach_the_engine(monkeypatch, rubric_folder):
    engine = stand_in_engine("/srv/models/private/judge.gguf")
    result, app = served_app(
        monkeypatch, engine, "--rubrics", str(rubric_folder), "--batch-tokens", "1234", "--protect-health", "--protect-metrics",
        "--docs", "--cors-origin", ORIGIN, "--cors-origin", "https://b.example", "--request-timeout", "2.5",
        "--body-timeout", "4", "--limit-concurrency", "9", "--work-threads", "3", "--max-body-bytes", "5000",
    )
    assert result.exit_code == 0, result.output
    settings = app.state.service.settings
    assert engine.options.max_batch_tokens == 1234 == settings.batching.token_budget
    assert settings.access.protect_health and settings.access.protect_metrics and settings.access.docs
    assert settings.access.cors_origins == (ORIGIN, "https://b.example")
    assert settings.limits.request_timeout_s == 2.5 and settings.limits.body_timeout_s == 4.0
    assert settings.limits.max_body_bytes == 5000
    assert settings.limit_concurrency == 9 and settings.work_threads == 3
    assert app.state.service.model_name == "judge.gguf"
    assert "warning" not in result.output  # loopback


def test_the_served_model_name_flag_and_a_warning_for_an_open_public_port(monkeypatch, rubric_folder):
    result, app = served_app(monkeypatch, stand_in_engine(), "--rubrics", str(rubric_folder), "--served-model-name", "judge-2",
                             "--host", "0.0.0.0")
    assert result.exit_code == 0, result.output
    assert app.state.service.model_name == "judge-2"
    assert "warning: serving on 0.0.0.0 without --api-key" in result.output
    result, _ = served_app(monkeypatch, stand_in_engine(), "--rubrics", str(rubric_folder), "--host", "0.0.0.0", "--api-key", "k")
    assert "warning" not in result.output


def test_the_server_is_configured_from_the_settings(rubric_folder):
    from decisionflow.serve.server import server_for

    with running_app(stand_in_engine(), rubric_folder, ServeSettings(limit_concurrency=7, batching=Batching(token_budget=99))) as (app, _):
        config = server_for(app).config
        assert config.limit_concurrency == 7 and config.server_header is False and config.access_log is False
        assert app.state.service.engine.options.max_batch_tokens == 99
