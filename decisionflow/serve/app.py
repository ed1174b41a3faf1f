"""The HTTP app: it wires the wire formats to the shared admission path, and holds the middleware.

    app = create_app(Engine.load())              # the shipped workflows, default limits
    uvicorn.run(app)                              # or `decisionflow serve`

Routes: `/v1/chat/completions` (`openai_chat`), `/v1/decisions` (`decisions`), `/v1/systemone` (`systemone`),
`/v1/rubrics/{name}/decide` (`rubrics`), `/v1/rubrics/decide` (`inline`), `/v1/rubrics`, `/v1/models`, `/healthz`,
`/readyz` and `/metrics`; `GET /` is the playground, a static page calling those routes (`page`) and the
workbench's (`workbench`: `/v1/rubrics/validate`, `/v1/rubrics/{name}/yaml`, `/v1/rubrics/export`,
`/v1/rubrics/coherence`, `/v1/rubrics/eval`).
Each wire format is a module of its own (its request read into a question set or inputs, its decision
written as its answer); what every route shares (the queue, the budgets of new question sets, the limits,
micro-batching) is `admission`; this module holds what is HTTP's: which route reads its body with which
reader, the body's type and size, the deadline, the API keys, CORS, request ids, the log line and the error
shape (OpenAI's on the routes the openai SDK reads).

The model is loaded before the app starts and is only ever run on the micro-batcher's worker thread.
The event loop moves bytes, dispatches and writes answers: bodies are parsed, question sets built and inputs tokenised
on a small pool of helper threads (`ServeSettings.work_threads`), so one large body never stalls
`/healthz`, `/metrics` or the dispatcher. Every refusal is a JSON error naming the offending field (see
`refusals`), and no request can stop the server: whatever one request raises is that request's answer,
and a failure of the server's own is a 500 whose traceback goes to the log, never to the client.

Every request has a deadline (`Limits.request_timeout_s`, 60 s by default): past it, or once its client
has gone, it is answered 504 (or not at all) and its work stops. Its asyncio task is cancelled, which takes
its inputs out of the queue, and its `Cancellation` is set: its own steps on the helper threads (parsing,
building a question set or reading a schema, compiling, admitting the input) check it between them, and
the model thread's checkpoints stop a call once nobody waits for it (see `batcher`).

Every answer carries `X-Request-ID` (the client's own when it sent a sane one, else a new one), and
every request is one JSON line of the `decisionflow.serve` log (see `logs`).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
import uuid
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import Match

from ..runtime.model.loading import is_hub_id
from .admission import (
    ClientGone,
    DecisionService,
    EventStream,
    QuestionSetRoute,
    RequestNote,
    Routes,
    log_failure,
    new_note,
    own_failure,
)
from .body import json_content_type, parse_json
from .decisions import ROUTE as DECISIONS_ROUTE
from .decisions import Decisions, parse_decision_request
from .engines import RouteEngines
from .inline import ROUTE as INLINE_ROUTE
from .inline import InlineRubricFormat, parse_inline_request
from .logs import log
from .metrics import CONTENT_TYPE, Metrics
from .openai_chat import ROUTE as CHAT_ROUTE
from .openai_chat import OpenAIChat, error_body, parse_chat_request
from .page import PAGE_PATHS, add_page
from .refusals import HttpRefusal, Refusal, internal_error, refusal_of
from .registry import RubricRegistry
from .rubrics import decide_named, parse_inputs
from .settings import ServeSettings, body_limit_for
from .systemone import SystemOne, parse_request
from .workbench import add_workbench_routes

if TYPE_CHECKING:
    from ..runtime.engine import Engine

CLIENT_GONE = 499
"""Status recorded (never sent) for a request whose client disconnected before its answer."""
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"
SYSTEMONE_ROUTE = "/v1/systemone"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
NOTE = "decisionflow"
"""Where a request's `RequestNote` lives in its ASGI scope's `state`."""


_OPENAI_PATHS = (CHAT_ROUTE, DECISIONS_ROUTE, "/v1/models")
"""Routes the openai SDK reads (`/v1/models` and `/v1/models/{model}` included): their errors take OpenAI's shape."""


class _TimedOut(Exception):
    pass


def note_of(request: Request) -> RequestNote:
    note = request.scope.get("state", {}).get(NOTE)
    if note is None:  # the app run without its front middleware (never by `create_app`)
        note = new_note()
        request.scope.setdefault("state", {})[NOTE] = note
    return note


class JSONAnswer(JSONResponse):
    """JSON that is always valid UTF-8: text holding a lone surrogate is escaped (`\\ud800`) rather than
    failing the answer; NaN and infinities are refused (they are not JSON), as a failure of the server."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def public_model_name(name: str) -> str:
    """The model's name as clients see it: a local path cut to its last part; hub ids and `bundled:` as they are."""
    if name.startswith("bundled:") or is_hub_id(name):
        return name
    return re.split(r"[\\/]", name.rstrip("/\\"))[-1] or "model"


def create_app(engine: Engine, registry: RubricRegistry | None = None, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving `engine` (already loaded); rubrics by name from `registry` (default: the shipped workflows).

    A rubric with a tuned adapter in `registry` is read by an engine over the same loaded model with its adapter
    merged (`engines.RouteEngines`; an adapter tuned on another model is a `ModelError`, and no app is made).
    Fitted heads in `registry` are checked against the engine that reads their rubric first: heads fitted for another
    model, rubric, prompt or option set are a `RubricError` naming each file, and no app is made; so is a rubric whose
    prompt leaves the model's context no room for an input. The engine's
    `max_batch_tokens` is set to the batching token budget (one model call packs what the batcher gathers)."""
    settings = settings or ServeSettings()
    settings = replace(settings, limits=replace(settings.limits, max_body_bytes=body_limit_for(engine, settings.limits)))
    metrics = Metrics()
    registry = registry or RubricRegistry.from_folder()
    _give_engine_the_budget(engine, settings.batching.token_budget)
    engines = RouteEngines(engine, registry)  # after the budget: adapted engines take the engine's options
    registry.check_heads(engine, engines.for_entry)
    prepared = getattr(engine, "prepared", None)
    if prepared is not None:
        registry.check_prompts(engine)
        for entry in registry.entries.values():
            # New question sets never push a served rubric out of the cache.
            engines.for_entry(entry).prepared.pin(entry.rubric)
        metrics.watch_prepared(prepared)
        metrics.watch_adapted(engines.adapted_caches())
    limits = settings.limits
    model_name = settings.served_model_name or public_model_name(str(engine.loaded.name))
    # Each route reads its body with its format's reader, on the helper threads: JSON first, then the format's checks.
    routes = Routes(
        systemone=QuestionSetRoute(SystemOne(), _reads(lambda body: parse_request(body, limits))),
        chat=QuestionSetRoute(OpenAIChat(limits, model_name), _reads(parse_chat_request)),
        decisions=QuestionSetRoute(Decisions(model_name, refusal_mass=settings.decisions_refusal_mass),
                                   _reads(parse_decision_request)),
        rubric_inputs=_reads(lambda body: parse_inputs(body, limits)),
    )
    service = DecisionService(engine, registry, settings, metrics, model_name=model_name, routes=routes, engines=engines)
    inline = QuestionSetRoute(InlineRubricFormat(limits), _reads(lambda body: parse_inline_request(body, limits)))
    access = settings.access

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.batcher.start()
        service.started = True
        try:
            yield
        finally:
            await service.batcher.stop()  # after uvicorn has let in-flight requests finish
            service.work.shutdown(wait=False, cancel_futures=True)

    docs = {} if access.docs else {"docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="decisionflow", summary="Typed, closed-set decisions from a language model.", lifespan=lifespan,
                  **docs)
    app.state.service = service
    timeout_s = settings.limits.request_timeout_s
    retry_after_s = settings.limits.retry_after_s

    async def answered(request: Request, work: Callable[[bytes, RequestNote], Awaitable[Any]]) -> Response:
        """Check the body's type, read it, do the work while watching for the client to leave and for the
        deadline, and shape the answer."""
        note = note_of(request)
        arrived = time.monotonic()
        try:
            if not json_content_type(request.headers.get("content-type")):
                sent = request.headers.get("content-type")
                charset = " with no charset but utf-8 (JSON is UTF-8)" if json_content_type((sent or "").split(";")[0]) else ""
                raise HttpRefusal(415, "UnsupportedMediaType", "the request body must be JSON, sent with "
                                  f"`Content-Type: application/json`{charset} (got {'none' if sent is None else repr(sent[:80])})",
                                  field="body")
            raw = await service.read_body(request)
            left = None if timeout_s is None else timeout_s - (time.monotonic() - arrived)
            result = await _unless_client_leaves(request, work(raw, note), left)
            if isinstance(result, EventStream):
                return StreamingResponse(iter(result.events), media_type="text/event-stream",
                                         headers={"Cache-Control": "no-cache"})
            return JSONAnswer(result)
        except ClientGone:
            return Response(status_code=CLIENT_GONE)
        except _TimedOut:
            service.metrics.rejected.labels(reason="timeout").inc()
            return refusal_response(note, Refusal(504, "Timeout", f"the request was not answered within {timeout_s:g} s "
                                                                 "(the server's request timeout)"))
        except Exception as error:  # noqa: BLE001 - every failure is this request's answer, never the server's end
            return error_response(note, error, retry_after_s)
        finally:
            note.cancellation.cancel()  # whatever still runs for this request alone stops at its next step

    @app.post(SYSTEMONE_ROUTE)
    async def systemone(request: Request) -> Response:
        """Answer independent `noul`/`choice`/`score` questions about a `state`, in the shared wire format."""
        return await answered(request, service.systemone)

    @app.post("/v1/rubrics/{name}/decide")
    async def decide(name: str, request: Request) -> Response:
        """Decide `{"text": ...}` (what `decisionflow run --json` prints) or `{"texts": [...]}` (`{"results": [...]}`)."""
        return await answered(request, lambda raw, note: decide_named(service, name, raw, note))

    @app.post(INLINE_ROUTE)
    async def decide_inline(request: Request) -> Response:
        """Decide `{"rubric": "<YAML>", "text": ...}`: a rubric sent with its input, as a question set (see `inline`)."""
        return await answered(request, lambda raw, note: service.question_set(inline, raw, note))

    add_workbench_routes(app, service, inline, limits, answered=answered, json_answer=JSONAnswer,
                         refused=lambda request, error: error_response(note_of(request), error, retry_after_s))

    @app.post(CHAT_ROUTE)
    async def chat_completions(request: Request) -> Response:
        """OpenAI's Chat Completions with `response_format` json_schema, or `tools` and a forced `tool_choice`:
        the schema is decided, not generated (see `openai_chat`)."""
        return await answered(request, service.chat_completions)

    @app.post(DECISIONS_ROUTE)
    async def decisions(request: Request) -> Response:
        """OpenAI's Decisions API: `predicate`, `choice` and `score` questions about one `input`, each read on
        its own (see `decisions`)."""
        return await answered(request, service.decisions)

    @app.get("/v1/rubrics")
    async def rubrics() -> Response:
        """The rubrics served by name: their fields and plans."""
        return JSONAnswer({"rubrics": service.registry.describe(pin_first=engine.options.pin_first)})

    @app.get("/v1/models")
    async def models() -> Response:
        """The model this server answers with, as the OpenAI-style model list names it."""
        return JSONAnswer({"object": "list", "data": [{"id": service.model_name, "object": "model",
                                                        "owned_by": "decisionflow"}]})

    @app.get("/v1/models/{model:path}")
    async def model(model: str, request: Request) -> Response:
        """One model, as OpenAI's API describes it (404 for any name but the one served)."""
        if model != service.model_name:
            return refusal_response(note_of(request), Refusal(404, "ModelNotFound", f"the model {model!r} does not exist "
                                                              f"on this server; it answers with {service.model_name!r}", "model"))
        return JSONAnswer({"id": service.model_name, "object": "model", "owned_by": "decisionflow"})

    @app.get("/healthz")
    async def healthz() -> Response:
        """Liveness: 200 while the dispatcher runs and the model thread is alive, else 503."""
        healthy, body = service.health()
        return JSONAnswer(body, status_code=200 if healthy else 503)

    @app.get("/readyz")
    async def readyz() -> Response:
        """Readiness: 200 once the model is loaded and the dispatcher runs; 503 before, while failing, and
        while the app stops."""
        ready, body = service.readiness()
        return JSONAnswer(body, status_code=200 if ready else 503)

    @app.get(METRICS_PATH)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)  # milliseconds: not worth a queue behind parsing

    add_page(app)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status_code, "HTTPError")
        where = "path" if error.status_code == 404 else "method"
        return refusal_response(note_of(request), Refusal(error.status_code, kind, str(error.detail), where,
                                                          headers=dict(error.headers or {})))

    open_paths = set(PAGE_PATHS)  # the playground's page and assets: static, no data
    if not access.protect_health:
        open_paths |= PROBE_PATHS
    if not access.protect_metrics:
        open_paths.add(METRICS_PATH)
    # Starlette wraps the last middleware added outermost: the front sees every request first, CORS answers
    # a browser's preflight before any key is asked for, then the key is checked.
    if access.api_keys:
        app.add_middleware(_KeyGuard, keys=access.api_keys, open_paths=frozenset(open_paths))
    if access.cors_origins:
        app.add_middleware(
            CORSMiddleware, allow_origins=list(access.cors_origins), allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"], expose_headers=["X-Request-ID", "Retry-After"],
        )
    app.add_middleware(_Front, metrics=metrics, router=app.router)
    return app


def _reads(parse: Callable[[Any], Any]) -> Callable[[bytes], Any]:
    """A route's reader: the body parsed as JSON (`body.parse_json`), then checked by its format's `parse`."""
    return lambda raw: parse(parse_json(raw))


def refusal_response(note: RequestNote, refusal: Refusal) -> Response:
    note.error_type = refusal.type
    body = error_body(refusal) if note.openai else refusal.body()
    return JSONAnswer(body, status_code=refusal.status, headers=refusal.headers or None)


def error_response(note: RequestNote, error: BaseException, retry_after_s: int) -> Response:
    """A request's error as its answer; a failure of the server's own is logged with its traceback first."""
    refusal = refusal_of(error, retry_after_s=retry_after_s)
    failure = own_failure(error, refusal)
    if failure is not None:
        log_failure(note, failure)
    return refusal_response(note, refusal)


def _give_engine_the_budget(engine: Engine, budget: int) -> None:
    options = getattr(engine, "options", None)
    if options is not None and getattr(options, "max_batch_tokens", budget) != budget:
        engine.options = replace(options, max_batch_tokens=budget)


async def _unless_client_leaves(request: Request, work: Awaitable[Any], timeout_s: float | None) -> Any:
    """`work`'s result; if the client disconnects first (`ClientGone`) or `timeout_s` passes (`_TimedOut`),
    `work` is cancelled: its inputs leave the queue if the model has not started on them (and the caller's
    `Cancellation` stops what runs on threads)."""
    if timeout_s is not None and timeout_s <= 0:
        close = getattr(work, "close", None)
        if close is not None:
            close()  # never started
        raise _TimedOut
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    raise ClientGone if watcher in done else _TimedOut


async def _disconnected(request: Request) -> None:
    # The body is read; the server's next message for this request is its disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _request_id(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's `X-Request-ID` when it is a sane token (1-128 characters of `A-Za-z0-9._:/+=@-`), else a new one."""
    for name, value in headers:
        if name == b"x-request-id":
            try:
                text = value.decode("ascii")
            except UnicodeDecodeError:
                break
            if _SANE_REQUEST_ID.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


class _KeyGuard:
    """ASGI wrapper asking for `Authorization: Bearer <key>` on every route but `open_paths` (401 otherwise).

    Keys are compared by their SHA-256 digests with `hmac.compare_digest`, against every key every time:
    how long a refusal takes says nothing about how much of a key was right, nor which key was tried."""

    def __init__(self, app: Any, keys: tuple[str, ...], open_paths: frozenset[str]) -> None:
        self.app = app
        self.digests = [hashlib.sha256(key.encode("utf-8")).digest() for key in keys]
        self.open_paths = open_paths

    def _accepts(self, headers: list[tuple[bytes, bytes]]) -> int | bool | None:
        """The valid key's position (0, 1, ...), False for a wrong one, None for none sent."""
        values = [value for name, value in headers if name == b"authorization"]
        if not values:
            return None
        scheme, _, token = values[0].strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        digest = hashlib.sha256(token.strip()).digest()
        matched: int | bool = False
        for position, known in enumerate(self.digests):
            if hmac.compare_digest(digest, known):
                matched = position
        return matched

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        note = scope["state"][NOTE]  # `_Front`, outside this guard, gave every request its note
        accepted = self._accepts(scope["headers"])
        if accepted is not None and accepted is not False:
            note.client = f"key {accepted + 1}"  # its position in --api-key, never the key itself
            await self.app(scope, receive, send)
            return
        message = ("this server needs an API key: send `Authorization: Bearer <key>`" if accepted is None
                   else "the API key is not valid (send `Authorization: Bearer <key>`)")
        refusal = Refusal(401, "Unauthorized", message, "authorization", headers={"WWW-Authenticate": "Bearer"})
        await refusal_response(note, refusal)(scope, receive, send)


class _Front:
    """ASGI wrapper around everything: gives each request its id (`X-Request-ID` on every answer), turns an
    exception nothing caught into a logged JSON 500, counts every answer by route template and status (and
    errors by type), times it, and writes the request's JSON log line."""

    def __init__(self, app: Any, metrics: Metrics, router: Any) -> None:
        self.app = app
        self.metrics = metrics
        self.router = router

    def _route(self, scope: dict[str, Any]) -> str:
        route = scope.get("route")
        if route is not None:
            return getattr(route, "path", "unmatched")
        for candidate in self.router.routes:  # refused before routing (a missing key): name the route anyway
            try:
                match, _ = candidate.matches(scope)
            except Exception:  # noqa: BLE001 - naming a route must never fail a request
                continue
            if match is not Match.NONE:
                return getattr(candidate, "path", "unmatched")
        return "unmatched"

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        note = RequestNote(_request_id(scope.get("headers", [])), openai=scope.get("path", "").startswith(_OPENAI_PATHS))
        scope.setdefault("state", {})[NOTE] = note
        header = (b"x-request-id", note.request_id.encode("ascii"))
        status: int | None = None
        began = time.perf_counter()

        async def send_and_note(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_and_note)
        except Exception as error:  # noqa: BLE001 - nothing a request raises ends the server
            log_failure(note, error)
            if status is None:
                await refusal_response(note, internal_error())(scope, receive, send_and_note)
            else:
                note.error_type = "InternalError"
                status = 500  # the answer had begun: the connection is cut, counted as the failure it is
        finally:
            self.metrics.in_flight.dec()
            seconds = time.perf_counter() - began
            final = CLIENT_GONE if status is None else status  # None: cancelled before any answer
            route = self._route(scope)
            self.metrics.requests.labels(route=route, status=str(final)).inc()
            self.metrics.request_seconds.labels(route=route).observe(seconds)
            if final >= 400 and final != CLIENT_GONE:
                self.metrics.errors.labels(route=route, status=str(final), type=note.error_type or "HTTPError").inc()
            log.info("request", extra={"fields": {
                "request_id": note.request_id, "method": scope.get("method"), "route": route,
                "path": scope.get("path", "")[:200], "rubric": note.rubric, "status": final,
                "error": note.error_type, "ms": round(seconds * 1000, 2),
                "queue_wait_ms": round(note.timing.queue_wait_s * 1000, 2), "model_ms": round(note.timing.model_s * 1000, 2),
                "client": (scope.get("client") or [None])[0],
            }})
