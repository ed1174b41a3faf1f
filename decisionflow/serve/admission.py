"""The one admission path every route takes, whatever its wire format: limits, budgets, batching, deadline.

A wire format (`systemone`, `openai_chat`, `decisions`, and the rubric route in `rubrics`) knows how its
requests read and how its answers are written; what happens between is the same for all and lives here:

1. the queue is asked first: a full queue refuses a request (503) before anything is spent on it;
2. on the helper threads (`off_loop`), the body is read into the format's request (the reader `app` gives
   each route), the format's own checks run (`check`: an unknown model is 404), and the question set is
   found among those already built, by content, or built;
3. a question set the engine has not prepared is charged to the client's budget (429 beyond it), compiled,
   and checked against the limits (its prompt before the input, its rows, the model's context) before
   anything is cached: a refused set costs its compilation and nothing else;
4. the input is tokenised and checked against the model's context: its token cost;
5. the input waits in the micro-batcher's queue with the other inputs of the same question set, and a new
   set's first call waits its turn to prepare (one preparation at a time reaches the model thread);
6. the decision is written in the format's shape, on the helper threads.

A request that is over (answered, past its deadline, or its client gone) stops at its next step: its steps on
the helper threads check its `Cancellation` between them, and the model thread's checkpoints stop a call once
nobody waits for it (see `batcher`). The deadline itself is `app`'s, which cancels the request's task.
"""

from __future__ import annotations

import asyncio
import functools
import math
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Protocol

from starlette.requests import ClientDisconnect

from ..errors import CompileError, DataError, DecisionflowError, InputError, Unavailable
from ..runtime.executor import check_fits
from ..spec.kinds import Reading
from .batcher import Cancellation, MicroBatcher, Stopped, Timing
from .body import read_body
from .budget import ANONYMOUS, PreparationBudget
from .cache import RecentlyBuilt
from .engines import RouteEngines
from .logs import log
from .metrics import Metrics
from .refusals import HttpRefusal, Located, Refusal
from .registry import RubricRegistry
from .settings import ServeSettings

if TYPE_CHECKING:
    from ..runtime.engine import Engine


class ClientGone(Exception):
    """The client disconnected before its request's body had arrived."""


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


def new_note() -> RequestNote:
    return RequestNote(uuid.uuid4().hex)


@dataclass(frozen=True)
class Answering:
    """What a format may need to write its answer besides the decision."""

    model: str
    """The model's name as clients see it."""
    request_id: str
    count_tokens: Callable[[str], int]
    """Tokens of a text in the model's tokenizer (a Chat Completions answer counts its own)."""


@dataclass(frozen=True)
class EventStream:
    """An answer sent as server-sent events (`app` streams `events` as `text/event-stream`)."""

    events: list[bytes]


class QuestionSetFormat(Protocol):
    """A wire format whose request asks one question set (a rubric built from the request) about one input."""

    route: str
    """Its name in the batcher's groups (`systemone`, `chat`, `decisions`) and in the keys of built sets."""

    def label(self, built: Any | None) -> str | None:
        """The request's `rubric` in the log: before its set is built (`built` None), and after."""

    def check(self, request: Any) -> None:
        """Refuse what this server cannot answer before the set is looked up (an unknown model: 404)."""

    def key(self, request: Any) -> str:
        """The question set's identity: requests with equal keys are one set (one rubric, one cache entry)."""

    def build(self, request: Any) -> Any:
        """The question set, with its `rubric`; a set that does not validate is refused naming where."""

    def field(self, request: Any) -> str:
        """Where the request sent its question set (what a budget or limit refusal names)."""

    def compile_refused(self, error: CompileError, request: Any, built: Any) -> Exception:
        """A compile error (answers the tokenizer cannot tell apart, an answer too long) placed in the request."""

    def payload(self, request: Any) -> Any:
        """The input the engine reads."""

    def input_refused(self, error: InputError, request: Any) -> Exception:
        """An input the engine cannot read (empty, too long for the context) as this format refuses it."""

    def answer(self, request: Any, built: Any, decision: Any, answering: Answering) -> Any:
        """The decision in this format's shape: a JSON-able object, or an `EventStream`."""


@dataclass(frozen=True)
class QuestionSetRoute:
    format: QuestionSetFormat
    read: Callable[[bytes], Any]
    """The body (bytes) to the format's request: JSON parsed, then checked part by part (on a helper thread)."""


@dataclass(frozen=True)
class Routes:
    """What `app` wires: each question-set route's format and reader, and the rubric route's reader."""

    systemone: QuestionSetRoute
    chat: QuestionSetRoute
    decisions: QuestionSetRoute
    rubric_inputs: Callable[[bytes], tuple[list[Any], bool]]
    """A rubric route's body to its inputs, and whether it sent one (`text`) rather than several (`texts`)."""


class DecisionService:
    """What the routes do, apart from HTTP: check a request, admit its inputs, queue them, shape answers."""

    def __init__(self, engine: Engine, registry: RubricRegistry, settings: ServeSettings, metrics: Metrics, *,
                 model_name: str, routes: Routes, engines: RouteEngines | None = None) -> None:
        self.engine = engine
        self.engines = engines or RouteEngines(engine, registry)
        """The engine each request is read by: a served rubric's adapted one where it has an adapter beside it."""
        self.registry = registry
        self.settings = settings
        self.limits = settings.limits
        self.metrics = metrics
        self.routes = routes
        self.batcher = MicroBatcher(engine, settings.batching, max_queue=self.limits.max_queue, metrics=metrics,
                                    engine_for=self.engines.for_target)
        self.question_sets = RecentlyBuilt(self.limits.max_cached_question_sets, self.limits.max_cached_question_set_bytes)
        """Question sets already built into rubrics (`/v1/systemone` questions, `/v1/chat/completions` schemas,
        `/v1/decisions` questions), by route and content (`QuestionSetFormat.key`)."""
        self.budget = PreparationBudget(self.limits.new_question_sets_per_minute, self.limits.new_question_set_burst)
        self.preparing = asyncio.Semaphore(1)
        """Held by the first call of a question set whose prefix is not prefilled yet (see `_decide_question_set`)."""
        self.work = ThreadPoolExecutor(max_workers=max(1, settings.work_threads), thread_name_prefix="decisionflow-work")
        self.model_name = model_name
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

    async def read_body(self, request: Any) -> bytes:
        """The body within the size limit and the body timeout (408, connection closed, when it is too slow)."""
        reading = read_body(request.stream(), request.headers.get("content-length"), self.limits.max_body_bytes)
        try:
            return await asyncio.wait_for(reading, self.limits.body_timeout_s)
        except ClientDisconnect:
            raise ClientGone from None
        except TimeoutError:
            raise HttpRefusal(408, "RequestTimeout", f"the request body did not arrive within "
                              f"{self.limits.body_timeout_s:g} s", field="body", headers={"Connection": "close"}) from None

    # -- the question-set routes ------------------------------------------------------------------------

    async def systemone(self, raw: bytes, note: RequestNote) -> Any:
        """`POST /v1/systemone` (see `systemone`)."""
        return await self._question_set(self.routes.systemone, self._systemone_request, raw, note)

    async def chat_completions(self, raw: bytes, note: RequestNote) -> Any:
        """`POST /v1/chat/completions` (see `openai_chat`)."""
        return await self._question_set(self.routes.chat, self._chat_request, raw, note)

    async def decisions(self, raw: bytes, note: RequestNote) -> Any:
        """`POST /v1/decisions` (see `decisions`)."""
        return await self._question_set(self.routes.decisions, self._decisions_request, raw, note)

    async def question_set(self, route: QuestionSetRoute, raw: bytes, note: RequestNote) -> Any:
        """A question-set route of a format `app` wires on its own (`POST /v1/rubrics/decide`, see `inline`)."""
        return await self._question_set(route, functools.partial(self._question_set_request, route), raw, note)

    # Each route's steps on the helper threads, by name (a request's own work, as its log and stops count it).
    def _systemone_request(self, raw: bytes, client: str, cancellation: Cancellation) -> tuple[Any, Any, int]:
        return self._question_set_request(self.routes.systemone, raw, client, cancellation)

    def _chat_request(self, raw: bytes, client: str, cancellation: Cancellation) -> tuple[Any, Any, int]:
        return self._question_set_request(self.routes.chat, raw, client, cancellation)

    def _decisions_request(self, raw: bytes, client: str, cancellation: Cancellation) -> tuple[Any, Any, int]:
        return self._question_set_request(self.routes.decisions, raw, client, cancellation)

    async def _question_set(self, route: QuestionSetRoute, steps: Callable[..., tuple[Any, Any, int]], raw: bytes,
                            note: RequestNote) -> Any:
        form = route.format
        note.rubric = form.label(None)
        self.batcher.refuse_if_full(1)  # before any parsing, building or tokenising
        request, built, cost = await self.off_loop(steps, raw, note.client, note.cancellation)
        note.rubric = form.label(built)
        payload = form.payload(request)
        outcome = await self._decide_question_set(form.route, built.rubric, payload, cost, note)
        if isinstance(outcome, InputError):
            raise form.input_refused(outcome, request)
        if isinstance(outcome, BaseException):
            raise outcome
        answering = Answering(self.model_name, note.request_id, lambda text: len(self.engine.view.encode(text)))
        return await self.off_loop(form.answer, request, built, outcome, answering)

    def _question_set_request(self, route: QuestionSetRoute, raw: bytes, client: str,
                              cancellation: Cancellation) -> tuple[Any, Any, int]:
        """The request read, its question set ready and its input admitted (its token cost). A set is found,
        or built (a set that does not validate costs no budget), then, within the client's budget, compiled
        and checked against the limits and the model's context before anything is cached. A request over
        before a step does not begin it (nor charge the budget)."""
        form = route.format
        request = route.read(raw)
        form.check(request)
        cancellation.check("convert")
        key = f"{form.route}:{form.key(request)}"
        built = self.question_sets.find(key)
        self.metrics.question_sets.labels(result="hit" if built is not None else "miss").inc()
        if built is None:
            built = form.build(request)
        if built.rubric not in self.engine.prepared:
            cancellation.check("compile")
            found = built
            self.prepare_rubric(built.rubric, client, form.field(request),
                                lambda error: form.compile_refused(error, request, found))
        self.question_sets.add(key, built)
        # A set the engine holds passed `_within_limits`, so its prompt fits: only the input can be too long.
        try:
            return request, built, admission(self.engine, built.rubric, form.payload(request), cancellation)
        except InputError as error:
            raise form.input_refused(error, request) from None

    async def _decide_question_set(self, route: str, rubric: Any, state: Any, cost: int, note: RequestNote) -> Any:
        """The first call of a set prefills its prefix and reads its content-free prior on the model thread.
        Such calls reach the queue one at a time, so a request of a prepared rubric waits behind at most
        one preparation, however many new sets arrive together; the others wait here, off the queue, and
        count as waiting for the set: a preparation stops only when no request waits for it any more."""
        def prepared() -> bool:
            found = self.engine.prepared.peek(rubric)
            return found is not None and found.prefix is not None and (
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

    def prepare_rubric(self, rubric: Any, client: str, field: str, located: Callable[[CompileError], Exception]) -> None:
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
        prefix = len(prepared.compiled.prefix_tokens)
        limit = self.limits.max_question_set_prefix_tokens
        if prefix > limit:
            raise Located(DataError(
                f"the question set's prompt is {prefix} tokens before the input; at most {limit} "
                "(max_question_set_prefix_tokens): ask fewer questions, or shorten their instructions and criteria"
            ), field)
        rows = sum(compiled.row_length for compiled in prepared.compiled.fields.values())
        limit = self.limits.max_question_set_row_tokens
        # Read shared, a field's row is its answers only (its question is in the prefix the limit above bounds).
        if prepared.compiled.rubric.reading is Reading.INDEPENDENT and rows > limit:
            raise Located(DataError(
                f"the question set's rows (each question with its answers, read after the input) are {rows} tokens; "
                f"at most {limit} (max_question_set_row_tokens): ask fewer questions, or shorten their instructions, "
                "answers and descriptions"
            ), field)
        try:
            check_fits(prepared.compiled, [], self.engine.backend.max_positions)
        except InputError as error:
            raise Located(error, field) from None

    # -- the rubric route ------------------------------------------------------------------------------------

    async def decide_one(self, group: Any, target: Any, calibration: Any, heads: Any, payload: Any, where: str,
                         note: RequestNote) -> Any:
        """One input of a served rubric admitted (tokenised off the event loop), queued and decided; its
        refusals located at `where`."""
        try:
            cost = await self.off_loop(admission, self.engines.for_target(target), target, payload, note.cancellation)
        except RubricTooLong as error:
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


class RubricTooLong(Exception):
    """A served rubric whose prompt alone fills the model's context (its own fault, not the input's)."""

    def __init__(self, error: InputError) -> None:
        super().__init__(str(error))
        self.error = error


def admission(engine: Engine, target: Any, payload: Any, cancellation: Cancellation | None = None) -> int:
    """Compile the rubric (cached), tokenise the input and check it against the model's context: the input's
    token cost (its tokens and every field's row)."""
    if cancellation is not None:
        cancellation.check("admit")
    compiled, _ = engine.compile(target)
    limit = engine.backend.max_positions
    if limit and compiled.positions_before_input >= limit:
        try:
            check_fits(compiled, [], limit)
        except InputError as error:
            raise RubricTooLong(error) from None
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
