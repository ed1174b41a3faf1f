"""The HTTP app: `/v1/systemone`, `/v1/rubrics/{name}/decide`, `/v1/rubrics`, `/v1/models`, `/healthz`,
`/readyz` and `/metrics`.

    app = create_app(Engine.load())              # the shipped workflows, default limits
    uvicorn.run(app)                              # or `decisionflow serve`

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
import functools
import hashlib
import hmac
import json
import math
import re
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from ..errors import CompileError, ContextLengthError, DataError, DecisionflowError, InputError, Unavailable
from ..runtime.executor import check_fits
from ..runtime.loading import is_hub_id
from ..spec.json_schema import SchemaError, SchemaRubric, from_json_schema
from .batcher import Cancellation, MicroBatcher, Stopped, Timing
from .body import first_repeated_key, input_shape_problem, json_content_type, parse_json, read_body
from .budget import ANONYMOUS, PreparationBudget
from .cache import RecentlyBuilt
from .logs import log
from .metrics import CONTENT_TYPE, Metrics
from .openai_chat import ROUTE as CHAT_ROUTE
from .openai_chat import ChatRequest, answer_text, chunks, completion, error_body, parse_chat_request, schema_key
from .refusals import HttpRefusal, Located, Refusal, field_path, internal_error, refusal_of
from .registry import RubricRegistry
from .settings import ServeSettings, body_limit_for
from .systemone import (
    QuestionSet,
    QuestionSets,
    SystemOneRequest,
    answers_of,
    build_question_set,
    located_compile_error,
    parse_request,
    usage_of,
)

DECIDE_KEYS = ("text", "texts")
CLIENT_GONE = 499
"""Status recorded (never sent) for a request whose client disconnected before its answer."""
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATH = "/metrics"
_SANE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
NOTE = "decisionflow"
"""Where a request's `RequestNote` lives in its ASGI scope's `state`."""


_OPENAI_PATHS = (CHAT_ROUTE, "/v1/models")
"""Routes the openai SDK reads (`/v1/models` and `/v1/models/{model}` included): their errors take OpenAI's shape."""


class _ClientGone(Exception):
    pass


class _TimedOut(Exception):
    pass


@dataclass
class RequestNote:
    """What the log line and the metrics say about one request, filled in as it is answered."""

    request_id: str
    rubric: str | None = None
    error_type: str | None = None
    timing: Timing = field(default_factory=Timing)
    client: str = ANONYMOUS
    """Whose budget a new question set is charged to: the API key's position (`key 2`), or every client's."""
    openai: bool = False
    """The request came to an OpenAI-compatible route: its errors take OpenAI's shape."""
    cancellation: Cancellation = field(default_factory=Cancellation)
    """Set once the request is over (answered, timed out, or its client gone): the work still running for it
    alone stops at its next step."""


def note_of(request: Request) -> RequestNote:
    note = request.scope.get("state", {}).get(NOTE)
    if note is None:  # the app run without its front middleware (never by `create_app`)
        note = RequestNote(uuid.uuid4().hex)
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


class DecisionService:
    """What the routes do, apart from HTTP: check a request, admit its inputs, queue them, shape answers."""

    def __init__(self, engine: Any, registry: RubricRegistry, settings: ServeSettings, metrics: Metrics) -> None:
        self.engine = engine
        self.registry = registry
        self.settings = settings
        self.limits = settings.limits
        self.metrics = metrics
        self.batcher = MicroBatcher(engine, settings.batching, max_queue=self.limits.max_queue, metrics=metrics)
        self.question_sets = QuestionSets(self.limits.max_cached_question_sets, self.limits.max_cached_question_set_bytes)
        self.schemas = RecentlyBuilt(self.limits.max_cached_question_sets, self.limits.max_cached_question_set_bytes)
        """`/v1/chat/completions` schemas already read into rubrics, by their canonical JSON (`schema_key`)."""
        self.budget = PreparationBudget(self.limits.new_question_sets_per_minute, self.limits.new_question_set_burst)
        self.preparing = asyncio.Semaphore(1)
        """Held by the first call of a question set whose head is not prefilled yet (see `_decide_question_set`)."""
        self.work = ThreadPoolExecutor(max_workers=max(1, settings.work_threads), thread_name_prefix="decisionflow-work")
        self.model_name = settings.served_model_name or public_model_name(str(engine.loaded.name))
        self.started = False

    async def off_loop(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` on the helper threads: CPU work never runs on the event loop. A step not yet
        begun when its request ends never runs (its future is cancelled); one running stops at its next check."""
        return await asyncio.get_running_loop().run_in_executor(self.work, functools.partial(self._counting_stops, function, *args))

    def _counting_stops(self, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(*args)
        except Stopped as stopped:  # nobody awaits it any more: counted, then dropped with the cancelled future
            self.metrics.stopped.labels(phase=stopped.phase).inc()
            raise

    async def read_body(self, request: Request) -> bytes:
        """The body within the size limit and the body timeout (408, connection closed, when it is too slow)."""
        reading = read_body(request.stream(), request.headers.get("content-length"), self.limits.max_body_bytes)
        try:
            return await asyncio.wait_for(reading, self.limits.body_timeout_s)
        except ClientDisconnect:
            raise _ClientGone from None
        except TimeoutError:
            raise HttpRefusal(408, "RequestTimeout", f"the request body did not arrive within "
                              f"{self.limits.body_timeout_s:g} s", field="body", headers={"Connection": "close"}) from None

    # -- /v1/systemone --------------------------------------------------------------------------------

    async def systemone(self, raw: bytes, note: RequestNote) -> dict[str, Any]:
        note.rubric = "systemone"
        self.batcher.refuse_if_full(1)  # before any parsing, building or tokenising
        parsed, question_set, cost = await self.off_loop(self._systemone_request, raw, note.client, note.cancellation)
        outcome = await self._decide_question_set("systemone", question_set.rubric, parsed.state, cost, note)
        if isinstance(outcome, BaseException):
            raise Located(outcome, "state") if isinstance(outcome, InputError) else outcome
        return {"model": self.model_name, "answers": answers_of(outcome, parsed, question_set), "usage": usage_of(outcome)}

    async def _decide_question_set(self, route: str, rubric: Any, state: Any, cost: int, note: RequestNote) -> Any:
        """The first call of a set prefills its head and reads its content-free prior on the model thread.
        Such calls reach the queue one at a time, so a request of a prepared rubric waits behind at most
        one preparation, however many new sets arrive together; the others wait here, off the queue, and
        count as waiting for the set: a preparation stops only when no request waits for it any more."""
        def prepared() -> bool:
            found = self.engine.prepared.peek(rubric)
            return found is not None and found.head is not None and (
                found.content_free is not None or not self.engine.prepared.reads_content_free(rubric))

        def decide() -> Any:
            return self.batcher.decide((route, rubric.key), rubric, state, cost=cost, timing=note.timing)

        with self.batcher.awaiting(rubric):
            if not prepared():
                async with self.preparing:
                    # Requests of the set that waited here while its first call prepared it go on together.
                    if not prepared():
                        return await decide()
            return await decide()

    def _systemone_request(
        self, raw: bytes, client: str, cancellation: Cancellation,
    ) -> tuple[SystemOneRequest, QuestionSet, int]:
        """The request parsed, its question set ready and its state admitted (its token cost). A set is
        found, or built (a set that does not validate costs no budget), then, within the client's budget,
        compiled and checked against the limits and the model's context before anything is cached. A request
        over before a step does not begin it (nor charge the budget)."""
        parsed = parse_request(parse_json(raw), self.limits)
        cancellation.check("convert")
        key = self.question_sets.key(parsed.questions)
        question_set = self.question_sets.find(key)
        self.metrics.question_sets.labels(result="hit" if question_set is not None else "miss").inc()
        if question_set is None:
            question_set = build_question_set(parsed.questions)
        if question_set.rubric not in self.engine.prepared:
            cancellation.check("compile")
            self._prepare_rubric(question_set.rubric, client, "questions",
                                 lambda error: Located(error, located_compile_error(str(error), question_set)))
        self.question_sets.add(key, question_set)
        # A set the engine holds passed `_within_limits`, so its prompt fits: only the state can be too long.
        try:
            return parsed, question_set, _admission(self.engine, question_set.rubric, parsed.state, cancellation)
        except InputError as error:
            raise Located(error, "state") from None

    def _prepare_rubric(self, rubric: Any, client: str, field: str, located: Callable[[CompileError], Exception]) -> None:
        """Charge the client's budget and compile a new question set's rubric, refusing it (nothing cached)
        over the limits; `field` names the request's part that asked it, `located` places a compile error."""
        wait = self.budget.charge(client)
        if wait is not None:
            self.metrics.rejected.labels(reason="question_set_budget").inc()
            raise HttpRefusal(
                429, "TooManyQuestionSets",
                f"this client has prepared its {self.limits.new_question_set_burst} new question sets and may prepare "
                f"{self.limits.new_question_sets_per_minute:g} a minute; ask again later, or reuse a question set "
                "already asked (those are never limited)",
                field=field, headers={"Retry-After": str(max(1, math.ceil(min(wait, 3600))))},
            )
        self.metrics.preparations.inc()
        try:
            self.engine.prepared.get(rubric, check=functools.partial(self._within_limits, field=field))
        except CompileError as error:
            raise located(error) from None

    def _within_limits(self, prepared: Any, *, field: str = "questions") -> None:
        head = len(prepared.compiled.head_tokens)
        limit = self.limits.max_question_set_head_tokens
        if head > limit:
            raise Located(DataError(
                f"the question set's prompt is {head} tokens before the input; at most {limit} "
                "(max_question_set_head_tokens): ask fewer questions, or shorten their instructions and criteria"
            ), field)
        try:
            check_fits(prepared.compiled, [], self.engine.backend.max_positions)
        except InputError as error:
            raise Located(error, field) from None

    # -- /v1/chat/completions -----------------------------------------------------------------------

    async def chat_completions(self, raw: bytes, note: RequestNote) -> Any:
        """A Chat Completions request with a JSON schema (or one forced function), decided (see `openai_chat`)."""
        self.batcher.refuse_if_full(1)  # before any parsing, reading of the schema or tokenising
        request, schema_rubric, cost = await self.off_loop(self._chat_request, raw, note.client, note.cancellation)
        note.rubric = f"chat:{schema_rubric.rubric.name}"
        outcome = await self._decide_question_set("chat", schema_rubric.rubric, list(request.turns), cost, note)
        if isinstance(outcome, InputError):
            raise _conversation_refused(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        answer, tokens = await self.off_loop(self._answer_text, schema_rubric, outcome)
        shaped = dict(model=self.model_name, request_id=note.request_id, completion_tokens=tokens, text=answer)
        if request.stream:
            events = list(chunks(request, schema_rubric, outcome, **shaped))
            return StreamingResponse(iter(events), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        return completion(request, schema_rubric, outcome, **shaped)

    def _chat_request(self, raw: bytes, client: str, cancellation: Cancellation) -> tuple[ChatRequest, SchemaRubric, int]:
        """The request parsed, its schema read into a rubric (found, or built and then prepared within the
        client's budget, as a new question set is) and its conversation admitted (its token cost); a request
        over before a step does not begin it."""
        request = parse_chat_request(parse_json(raw))
        if request.model != self.model_name:
            raise HttpRefusal(404, "ModelNotFound", f"the model {request.model!r} does not exist on this server; it "
                              f"answers with {self.model_name!r} (GET /v1/models)", field="model")
        cancellation.check("convert")
        key = schema_key(request)
        schema_rubric = self.schemas.find(key)
        self.metrics.question_sets.labels(result="hit" if schema_rubric is not None else "miss").inc()
        if schema_rubric is None:
            try:
                schema_rubric = from_json_schema(
                    request.schema, name=request.schema_name, instructions=request.instructions, input_turns=True,
                    max_fields=self.limits.max_schema_fields, max_options=self.limits.max_schema_options)
            except SchemaError as error:
                raise HttpRefusal(400, "SchemaError", f"{error.path}: {error.problems[0].message}",
                                  field=request.schema_field) from None
        if schema_rubric.rubric not in self.engine.prepared:
            cancellation.check("compile")
            self._prepare_rubric(schema_rubric.rubric, client, request.schema_field,
                                 lambda error: Located(error, request.schema_field))
        self.schemas.add(key, schema_rubric)
        try:
            return request, schema_rubric, _admission(self.engine, schema_rubric.rubric, list(request.turns), cancellation)
        except InputError as error:
            raise _conversation_refused(error) from None

    def _answer_text(self, schema_rubric: SchemaRubric, decision: Any) -> tuple[str, int]:
        text = answer_text(schema_rubric.answer(decision))
        return text, len(self.engine.view.encode(text))

    # -- /v1/rubrics/{name}/decide ------------------------------------------------------------------

    async def decide_named(self, name: str, raw: bytes, note: RequestNote) -> dict[str, Any]:
        entry = self.registry.get(name)
        if entry is None:
            raise HttpRefusal(404, "NotFound", f"no rubric named {name!r}; GET /v1/rubrics lists the rubrics served",
                              field="name")
        note.rubric = name
        payloads, single = await self.off_loop(self._decide_inputs, raw)
        self.batcher.refuse_if_full(len(payloads))
        fields = ["text"] if single else [field_path("texts", i) for i in range(len(payloads))]
        async def decide(payload: Any, where: str) -> Any:
            what = input_shape_problem(payload)
            if what is not None:
                # What no input is (a number, a boolean, ...); a list of strings in `text` was meant as `texts`.
                hint = "; for several inputs, give `texts`" if single and what.startswith("a list of") else ""
                raise Located(DataError(f"an input must be a string, an object or a list (a conversation of "
                                        f"{{role, content}} messages, or structured data), got {what}{hint}"), where)
            return await self._decide_one(("rubric", name), entry.rubric, entry.calibration, entry.heads, payload,
                                          where, note)

        outcomes = await asyncio.gather(*(decide(payload, where) for payload, where in zip(payloads, fields)),
                                        return_exceptions=True)
        if single:
            if isinstance(outcomes[0], BaseException):
                raise outcomes[0]
            return outcomes[0].to_dict()
        results = []
        for outcome in outcomes:
            if isinstance(outcome, asyncio.CancelledError):
                raise outcome
            if isinstance(outcome, BaseException):
                refusal = refusal_of(outcome, retry_after_s=self.limits.retry_after_s)
                failure = own_failure(outcome, refusal)
                if failure is not None:
                    log_failure(note, failure, "an input of the request failed")
                results.append(refusal.body())
            else:
                results.append(outcome.to_dict())
        return {"results": results}

    def _decide_inputs(self, raw: bytes) -> tuple[list[Any], bool]:
        body = parse_json(raw)
        if not isinstance(body, dict):
            raise Located(DataError('the request body must be a JSON object: {"text": ...} or {"texts": [...]}'), "body")
        repeated = first_repeated_key(body)
        if repeated is not None:
            raise Located(DataError(f"key {repeated[1]!r} appears twice in the same object"), repeated[0])
        unknown = [key for key in body if key not in DECIDE_KEYS]
        if unknown:
            raise Located(DataError(f"unknown key {unknown[0]!r} (allowed: text or texts)"), field_path(unknown[0]))
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

    async def _decide_one(self, group: Any, target: Any, calibration: Any, heads: Any, payload: Any, where: str,
                          note: RequestNote) -> Any:
        try:
            cost = await self._admit(target, payload, note.cancellation)
        except _RubricTooLong as error:
            raise error.error from None
        except InputError as error:
            raise Located(error, where) from None
        outcome = await self.batcher.decide(group, target, payload, cost=cost, calibration=calibration, heads=heads,
                                            timing=note.timing)
        if isinstance(outcome, DecisionflowError):
            raise Located(outcome, where)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def _admit(self, target: Any, payload: Any, cancellation: Cancellation) -> int:
        """Compile the rubric (cached), tokenise and size-check the input off the event loop: its token cost."""
        return await self.off_loop(_admission, self.engine, target, payload, cancellation)

    # -- health ---------------------------------------------------------------------------------------

    def health(self) -> tuple[bool, dict[str, Any]]:
        batcher = self.batcher
        checks = {
            "dispatcher": "running" if batcher.dispatcher_alive else "stopped",
            "model_thread": "alive" if batcher.model_thread_alive else "stopped",
        }
        healthy = self.started and batcher.alive
        return healthy, {"status": "ok" if healthy else "failing", "model": self.model_name, **checks,
                         "queue_depth": batcher.depth, "model_busy_s": round(batcher.busy_s, 3)}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        healthy, _ = self.health()
        if not self.started:
            return False, {"status": "starting", "model": self.model_name}
        if self.batcher.closing:
            return False, {"status": "shutting down", "model": self.model_name}
        return healthy, {"status": "ready" if healthy else "failing", "model": self.model_name}


def _conversation_refused(error: InputError) -> HttpRefusal:
    """A conversation the engine cannot read, as the 400 OpenAI's API answers (too long: `context_length_exceeded`)."""
    kind = "ContextLengthExceeded" if isinstance(error, ContextLengthError) else "InvalidConversation"
    error.input_index = None
    return HttpRefusal(400, kind, str(error), field="messages")


class _RubricTooLong(Exception):
    def __init__(self, error: InputError) -> None:
        super().__init__(str(error))
        self.error = error


def _admission(engine: Any, target: Any, payload: Any, cancellation: Cancellation | None = None) -> int:
    if cancellation is not None:
        cancellation.check("admit")
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


def own_failure(error: BaseException, refusal: Refusal) -> BaseException | None:
    """The error to log when `refusal` answers a failure of the server's own; None for a refusal it meant
    (an HTTP refusal, `Unavailable`: a full queue, shutting down), located or not."""
    cause = error.error if isinstance(error, Located) else error
    if refusal.status < 500 or isinstance(cause, (HttpRefusal, Unavailable)):
        return None
    return cause


def log_failure(note: RequestNote, error: BaseException, message: str = "request failed") -> None:
    """A failure of the server's own, with its traceback, under the request's id (never sent to the client)."""
    log.error(message, exc_info=(type(error), error, error.__traceback__),
              extra={"fields": {"request_id": note.request_id, "rubric": note.rubric}})


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


def create_app(engine: Any, registry: RubricRegistry | None = None, settings: ServeSettings | None = None) -> FastAPI:
    """The ASGI app serving `engine` (already loaded); rubrics by name from `registry` (default: the shipped workflows).

    Fitted heads in `registry` are checked against `engine` first: heads fitted for another model, rubric,
    prompt or option set are a `RubricError` naming each file, and no app is made; so is a rubric whose
    prompt leaves the model's context no room for an input. The engine's
    `max_batch_tokens` is set to the batching token budget (one model call packs what the batcher gathers)."""
    settings = settings or ServeSettings()
    settings = replace(settings, limits=replace(settings.limits, max_body_bytes=body_limit_for(engine, settings.limits)))
    metrics = Metrics()
    registry = registry or RubricRegistry.from_folder()
    registry.check_heads(engine)
    _give_engine_the_budget(engine, settings.batching.token_budget)
    prepared = getattr(engine, "prepared", None)
    if prepared is not None:
        registry.check_prompts(engine)
        for entry in registry.entries.values():
            prepared.pin(entry.rubric)  # new question sets never push a served rubric out of the cache
        metrics.watch_prepared(prepared)
    service = DecisionService(engine, registry, settings, metrics)
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
            return result if isinstance(result, Response) else JSONAnswer(result)
        except _ClientGone:
            return Response(status_code=CLIENT_GONE)
        except _TimedOut:
            service.metrics.rejected.labels(reason="timeout").inc()
            return refusal_response(note, Refusal(504, "Timeout", f"the request was not answered within {timeout_s:g} s "
                                                                 "(the server's request timeout)"))
        except Exception as error:  # noqa: BLE001 - every failure is this request's answer, never the server's end
            return error_response(note, error, retry_after_s)
        finally:
            note.cancellation.cancel()  # whatever still runs for this request alone stops at its next step

    @app.post("/v1/systemone")
    async def systemone(request: Request) -> Response:
        """Answer independent `noul`/`choice`/`score` questions about a `state`, in the shared wire format."""
        return await answered(request, service.systemone)

    @app.post("/v1/rubrics/{name}/decide")
    async def decide(name: str, request: Request) -> Response:
        """Decide `{"text": ...}` (what `decisionflow run --json` prints) or `{"texts": [...]}` (`{"results": [...]}`)."""
        return await answered(request, lambda raw, note: service.decide_named(name, raw, note))

    @app.post(CHAT_ROUTE)
    async def chat_completions(request: Request) -> Response:
        """OpenAI's Chat Completions with `response_format` json_schema, or `tools` and a forced `tool_choice`:
        the schema is decided, not generated (see `openai_chat`)."""
        return await answered(request, service.chat_completions)

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

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> Response:
        kind = {404: "NotFound", 405: "MethodNotAllowed"}.get(error.status_code, "HTTPError")
        where = "path" if error.status_code == 404 else "method"
        return refusal_response(note_of(request), Refusal(error.status_code, kind, str(error.detail), where,
                                                          headers=dict(error.headers or {})))

    open_paths = set()
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


def _give_engine_the_budget(engine: Any, budget: int) -> None:
    options = getattr(engine, "options", None)
    if getattr(options, "max_batch_tokens", budget) != budget:
        engine.options = replace(options, max_batch_tokens=budget)


async def _unless_client_leaves(request: Request, work: Awaitable[Any], timeout_s: float | None) -> Any:
    """`work`'s result; if the client disconnects first (`_ClientGone`) or `timeout_s` passes (`_TimedOut`),
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
    raise _ClientGone if watcher in done else _TimedOut


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
