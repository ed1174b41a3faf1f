"""The HTTP app: `/v1/systemone`, `/v1/rubrics/{name}/decide`, `/v1/rubrics`, `/healthz` and `/metrics`.

    app = create_app(Engine.load())              # the shipped workflows, default limits
    uvicorn.run(app)                              # or `decisionflow serve`

The model is loaded before the app starts and is only ever run on the micro-batcher's worker thread;
the event loop reads bodies, checks them, tokenises inputs on a helper thread and waits for answers.
Every refusal is a JSON error naming the offending field (see `refusals`), and no request can stop
the server: whatever one request raises is that request's answer.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ..errors import CompileError, DataError, DecisionflowError, InputError
from ..runtime.executor import check_fits
from .batcher import MicroBatcher, at_capacity
from .body import first_repeated_key, parse_json, read_body
from .metrics import CONTENT_TYPE, Metrics
from .refusals import HttpRefusal, Located, Refusal, field_path, refusal_of
from .registry import RubricRegistry
from .settings import ServeSettings
from .systemone import QuestionSets, answers_of, located_compile_error, parse_request, usage_of

DECIDE_KEYS = ("text", "texts")
CLIENT_GONE = 499
"""Status recorded (never sent) for a request whose client disconnected before its answer."""


class _ClientGone(Exception):
    pass


class DecisionService:
    """What the routes do, apart from HTTP: check a request, admit its inputs, queue them, shape answers."""

    def __init__(self, engine: Any, registry: RubricRegistry, settings: ServeSettings, metrics: Metrics) -> None:
        self.engine = engine
        self.registry = registry
        self.settings = settings
        self.limits = settings.limits
        self.metrics = metrics
        self.batcher = MicroBatcher(engine, settings.batching, max_queue=self.limits.max_queue, metrics=metrics)
        self.question_sets = QuestionSets(self.limits.max_cached_question_sets)

    @property
    def model_name(self) -> str:
        return str(self.engine.loaded.name)

    async def read_json(self, request: Request) -> Any:
        try:
            body = await read_body(request.stream(), request.headers.get("content-length"), self.limits.max_body_bytes)
        except ClientDisconnect:
            raise _ClientGone from None
        return parse_json(body)

    async def systemone(self, body: Any) -> dict[str, Any]:
        parsed = parse_request(body, self.limits)
        question_set = self.question_sets.get(parsed.questions)
        rubric = question_set.rubric
        try:
            cost = await self._admit(rubric, parsed.state)
        except CompileError as error:
            raise Located(error, located_compile_error(str(error), question_set)) from None
        except _RubricTooLong as error:
            raise Located(error.error, "questions") from None
        except InputError as error:
            raise Located(error, "state") from None
        outcome = await self.batcher.decide(("systemone", rubric.key), rubric, parsed.state, cost=cost)
        if isinstance(outcome, BaseException):
            raise Located(outcome, "state") if isinstance(outcome, InputError) else outcome
        return {"model": self.model_name, "answers": answers_of(outcome, parsed, question_set), "usage": usage_of(outcome)}

    async def decide_named(self, name: str, body: Any) -> dict[str, Any]:
        entry = self.registry.get(name)
        if entry is None:
            known = ", ".join(self.registry.entries) or "none"
            raise HttpRefusal(404, "NotFound", f"no rubric named {name!r} (served: {known})", field="name")
        payloads, single = self._decide_inputs(body)
        if self.batcher.depth + len(payloads) > self.limits.max_queue:
            self.metrics.rejected.labels(reason="queue_full").inc(len(payloads))  # inputs, as the batcher counts
            raise at_capacity(self.batcher.depth)
        fields = ["text"] if single else [field_path("texts", i) for i in range(len(payloads))]
        outcomes = await asyncio.gather(
            *(self._decide_one(("rubric", name), entry.rubric, entry.calibration, entry.heads, payload, where)
              for payload, where in zip(payloads, fields)),
            return_exceptions=True,
        )
        if single:
            if isinstance(outcomes[0], BaseException):
                raise outcomes[0]
            return outcomes[0].to_dict()
        return {"results": [
            refusal_of(outcome, retry_after_s=self.limits.retry_after_s).body() if isinstance(outcome, BaseException)
            else outcome.to_dict()
            for outcome in outcomes
        ]}

    def _decide_inputs(self, body: Any) -> tuple[list[Any], bool]:
        if not isinstance(body, dict):
            raise Located(DataError('the request body must be a JSON object: {"text": ...} or {"texts": [...]}'), "body")
        repeated = first_repeated_key(body)
        if repeated is not None:
            raise Located(DataError(f"key {repeated[1]!r} appears twice in the same object"), repeated[0])
        unknown = [key for key in body if key not in DECIDE_KEYS]
        if unknown:
            raise Located(DataError(f"unknown key {unknown[0]!r} (allowed: text or texts)"), unknown[0])
        if ("text" in body) == ("texts" in body):
            raise Located(DataError("give exactly one of `text` (one input) or `texts` (a list of inputs)"), "text")
        if "text" in body:
            return [body["text"]], True
        texts = body["texts"]
        if not isinstance(texts, list) or not texts:
            raise Located(DataError("`texts` must be a non-empty list of inputs"), "texts")
        if len(texts) > self.limits.max_texts:
            raise Located(DataError(f"{len(texts)} inputs; at most {self.limits.max_texts} per request"), "texts")
        if len(texts) > self.limits.max_queue:
            # More inputs than the queue holds could never be admitted: refused for good, not a retryable 503.
            raise Located(DataError(f"{len(texts)} inputs; at most {self.limits.max_queue} per request, "
                                    f"the most the server's queue holds (max_queue)"), "texts")
        return texts, False

    async def _decide_one(self, group: Any, target: Any, calibration: Any, heads: Any, payload: Any, where: str) -> Any:
        try:
            cost = await self._admit(target, payload)
        except _RubricTooLong as error:
            raise error.error from None
        except InputError as error:
            raise Located(error, where) from None
        outcome = await self.batcher.decide(group, target, payload, cost=cost, calibration=calibration, heads=heads)
        if isinstance(outcome, DecisionflowError):
            raise Located(outcome, where)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _admit(self, target: Any, payload: Any) -> int:
        """Compile the rubric (cached), tokenise and size-check the input off the event loop: its token cost."""
        return await asyncio.to_thread(_admission, self.engine, target, payload)


class _RubricTooLong(Exception):
    def __init__(self, error: InputError) -> None:
        super().__init__(str(error))
        self.error = error


def _admission(engine: Any, target: Any, payload: Any) -> int:
    compiled, _ = engine.compile(target)
    limit = engine.backend.max_positions
    if limit and compiled.positions_before_input >= limit:
        try:
            check_fits(compiled, [], limit)
        except InputError as error:
            raise _RubricTooLong(error) from None
    tokens = compiled.request_tokens(payload)
    check_fits(compiled, tokens, limit)
    rows = sum(f.row_length + max(map(len, f.answer_lines)) for f in compiled.fields.values())
    return len(tokens) + rows


def create_app(engine: Any, registry: RubricRegistry | None = None, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving `engine` (already loaded); rubrics by name from `registry` (default: the shipped workflows).

    Fitted heads in `registry` are checked against `engine` first: heads fitted for another model, rubric,
    prompt or option set are a `RubricError` naming each file, and no app is made."""
    settings = settings or ServeSettings()
    metrics = Metrics()
    registry = registry or RubricRegistry.from_folder()
    registry.check_heads(engine)
    service = DecisionService(engine, registry, settings, metrics)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await service.batcher.start()
        try:
            yield
        finally:
            await service.batcher.stop()  # after uvicorn has let in-flight requests finish

    app = FastAPI(title="decisionflow", summary="Typed, closed-set decisions from a language model.", lifespan=lifespan)
    app.state.service = service

    async def answered(request: Request, work: Callable[[Any], Awaitable[Any]]) -> Response:
        """Read the JSON body, do the work while watching for the client to leave, and shape the answer."""
        try:
            body = await service.read_json(request)
            result = await _unless_client_leaves(request, work(body))
        except _ClientGone:
            return Response(status_code=CLIENT_GONE)
        except Exception as error:  # noqa: BLE001 - every failure is this request's answer, never the server's end
            return _refusal_response(refusal_of(error, retry_after_s=settings.limits.retry_after_s))
        return JSONResponse(result)

    @app.post("/v1/systemone")
    async def systemone(request: Request) -> Response:
        """Answer independent `noul`/`choice`/`score` questions about a `state`, in the shared wire format."""
        return await answered(request, service.systemone)

    @app.post("/v1/rubrics/{name}/decide")
    async def decide(name: str, request: Request) -> Response:
        """Decide `{"text": ...}` (what `decisionflow run --json` prints) or `{"texts": [...]}` (`{"results": [...]}`)."""
        return await answered(request, lambda body: service.decide_named(name, body))

    @app.get("/v1/rubrics")
    async def rubrics() -> dict[str, Any]:
        """The rubrics served by name: their fields and plans."""
        return {"rubrics": service.registry.describe(pin_first=engine.options.pin_first)}

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "model": service.model_name, "queue_depth": service.batcher.depth}

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, error: StarletteHTTPException) -> Response:
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status_code, "HTTPError")
        return _refusal_response(Refusal(error.status_code, kind, str(error.detail), "path" if error.status_code == 404 else "method"))

    app.add_middleware(_Measured, metrics=metrics)
    return app


async def _unless_client_leaves(request: Request, work: Awaitable[Any]) -> Any:
    """`work`'s result; if the client disconnects first, `work` is cancelled (its inputs leave the queue)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        raise _ClientGone
    return task.result()


async def _disconnected(request: Request) -> None:
    # The body is read; the server's next message for this request is its disconnect.
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _refusal_response(refusal: Refusal) -> Response:
    return JSONResponse(refusal.body(), status_code=refusal.status, headers=refusal.headers or None)


class _Measured:
    """ASGI wrapper counting every answer by route template and status, and timing it."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = CLIENT_GONE
        began = time.perf_counter()

        async def send_and_note(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_and_note)
        finally:
            self.metrics.in_flight.dec()
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(route=route, status=str(status)).inc()
            self.metrics.request_seconds.labels(route=route).observe(time.perf_counter() - began)
