"""Micro-batching: concurrent inputs of one rubric go through the model together, on one worker thread.

Every input waits in one queue. A dispatcher on the event loop takes the oldest input, lets it wait a
few milliseconds when the model is idle (under load the queue fills while the model works, so no wait
is added), gathers the other waiting inputs of the same rubric up to a token budget, and runs them as
one `engine.decide_each` call on the model's own thread, so the event loop never blocks on torch.

`decide_each` returns one outcome per input in order, and each outcome goes back to the future of the
input it belongs to: answers are never mixed between requests, and one bad input fails only itself.
An input whose client went away (or whose request ran out of time) is cancelled: dropped from the
queue if it has not started; if it has, its model call stops at the engine's next checkpoint once no
input of the call is waited for (before the prefix prefill, before each pass of the content-free reading,
before each pass of the inputs), and the others in its batch are unaffected. A rubric's preparation (its
prefix prefill and content-free reading, done by its first call) is shared: it stops only when no request
waits for that rubric at all, in the queue or before it (`awaiting`); what was finished stays, and the
next call that needs the rest does it.

`alive` says whether the dispatcher runs and the model thread exists (what `/healthz` reports); should
the dispatcher ever stop on an error of its own, the error is logged and every waiting input fails
with 503 instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterator

from ..errors import DecisionflowError, Unavailable
from .logs import log
from .metrics import Metrics
from .settings import Batching

if TYPE_CHECKING:
    from ..runtime.engine import Engine


@dataclass
class Timing:
    """How long a request's inputs waited in the queue and how long their model calls ran (the longest of
    its inputs: they wait and run side by side)."""

    queue_wait_s: float = 0.0
    model_s: float = 0.0

    def add(self, queue_wait_s: float, model_s: float) -> None:
        self.queue_wait_s = max(self.queue_wait_s, queue_wait_s)
        self.model_s = max(self.model_s, model_s)


class Stopped(Exception):
    """Work ended at a checkpoint because no request waits for it any more."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"stopped before {phase}: no request waits for it any more")
        self.phase = phase


class Cancellation:
    """A request's cancellation token, carried with the work done for it: cancelled once the request is over
    (its client gone, its deadline passed, or answered). The request's own steps on the helper threads ask
    `check` between them; a model call asks the batcher, which knows who else waits for the same work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, phase: str) -> None:
        """Raise `Stopped(phase)` when the request is over: `phase` is the step that would begin."""
        if self._event.is_set():
            raise Stopped(phase)


@dataclass(eq=False)
class _Waiting:
    group: Hashable
    """Inputs of one group share a rubric (and calibration and heads) and may share a model call."""
    target: Any
    calibration: Any
    heads: Any
    payload: Any
    cost: int
    """New tokens this input feeds (its input and its rows)."""
    future: asyncio.Future
    since: float
    waited: float = 0.0
    """Seconds from queueing to the start of its model call."""
    ran: float = 0.0
    """Seconds of its model call(s)."""
    abandoned: bool = False
    """Its request stopped waiting (client gone, deadline passed): set on the event loop, read by the model thread."""


def at_capacity(waiting: int) -> Unavailable:
    """The 503 for a full queue (a retry can succeed once the model has worked through some of it)."""
    inputs = "1 input is" if waiting == 1 else f"{waiting} inputs are"
    return Unavailable(f"the server is at capacity ({inputs} waiting); retry shortly")


class MicroBatcher:
    def __init__(self, engine: Engine, batching: Batching, *, max_queue: int, metrics: Metrics,
                 engine_for: Callable[[Any], Engine] | None = None) -> None:
        self.engine = engine
        self.engine_for = engine_for or (lambda target: engine)
        """The engine a call's rubric is read by (a served rubric's adapted one); every call runs on the one model thread."""
        self.batching = batching
        self.max_queue = max_queue
        self.metrics = metrics
        self._queue: deque[_Waiting] = deque()
        self._model_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decisionflow-model")
        self._model_worker: threading.Thread | None = None
        self._wake: asyncio.Event | None = None
        self._dispatcher: asyncio.Task | None = None
        self._closing = False
        self._busy_since: float | None = None
        self._running: list[_Waiting] = []
        self._awaited: Counter[Hashable] = Counter()
        self._awaited_lock = threading.Lock()

    @property
    def depth(self) -> int:
        """Inputs waiting for the model (not counting the batch it is working on)."""
        return sum(not item.future.done() for item in self._queue)

    @property
    def dispatcher_alive(self) -> bool:
        return self._dispatcher is not None and not self._dispatcher.done()

    @property
    def model_thread_alive(self) -> bool:
        return self._model_worker is not None and self._model_worker.is_alive()

    @property
    def alive(self) -> bool:
        """The dispatcher runs and the model thread exists: queued inputs will be decided."""
        return self.dispatcher_alive and self.model_thread_alive

    @property
    def closing(self) -> bool:
        return self._closing

    @property
    def busy_s(self) -> float:
        """How long the model call in progress has been running (0 when the model is idle)."""
        return 0.0 if self._busy_since is None else time.perf_counter() - self._busy_since

    async def start(self) -> None:
        self._wake = asyncio.Event()
        # Start the model thread now (a thread pool starts its threads on first use) and keep hold of it.
        loop = asyncio.get_running_loop()
        self._model_worker = await loop.run_in_executor(self._model_thread, threading.current_thread)
        self._dispatcher = asyncio.create_task(self._dispatch(), name="decisionflow-dispatcher")
        self._dispatcher.add_done_callback(self._dispatcher_ended)

    def _dispatcher_ended(self, task: asyncio.Task) -> None:
        error = None if task.cancelled() else task.exception()
        if error is None and self._closing and not self._queue and not self._running:
            return  # stopped as asked, nothing left behind
        if error is not None:
            log.error("the dispatcher stopped: %s", error, exc_info=(type(error), error, error.__traceback__))
        else:
            log.error("the dispatcher stopped (cancelled); inputs can no longer be decided")
        for item in [*self._running, *self._queue]:
            if not item.future.done():
                item.future.set_result(Unavailable("the server cannot decide inputs now (its dispatcher stopped)"))
        self._queue.clear()
        self.metrics.queue_depth.set(0)

    async def stop(self) -> None:
        """Finish every input already queued, then release the model thread."""
        self._closing = True
        if self._wake is not None:
            self._wake.set()
        if self._dispatcher is not None and not self._dispatcher.done():
            await self._dispatcher
        self._model_thread.shutdown(wait=True)

    def refuse_if_full(self, inputs: int = 1) -> None:
        """Raise the 503 a request of `inputs` inputs would get now (shutting down, not running, or a full
        queue), before any work is spent on it."""
        if self._closing:
            raise Unavailable("the server is shutting down")
        if self._dispatcher is not None and not self.alive:
            raise Unavailable("the server cannot decide inputs now (its dispatcher or model thread stopped)")
        waiting = self.depth
        if waiting + inputs > self.max_queue:
            self.metrics.rejected.labels(reason="queue_full").inc(inputs)  # inputs, not requests
            raise at_capacity(waiting)

    @contextmanager
    def awaiting(self, target: Any) -> Iterator[None]:
        """Count a request as waiting for `target`'s preparation while in the block, before it reaches the
        queue too (a new question set's requests wait their turn off the queue): a preparation another
        request waits for is never stopped for the one that started it."""
        key = preparation_key(target)
        with self._awaited_lock:
            self._awaited[key] += 1
        try:
            yield
        finally:
            with self._awaited_lock:
                self._awaited[key] -= 1
                if not self._awaited[key]:
                    del self._awaited[key]

    def awaited(self, target: Any) -> bool:
        """Whether a live request waits for `target` (safe from the model thread)."""
        with self._awaited_lock:
            return self._awaited[preparation_key(target)] > 0

    async def decide(
        self, group: Hashable, target: Any, payload: Any, *, cost: int, calibration: Any = None, heads: Any = None,
        timing: Timing | None = None,
    ) -> Any:
        """Queue one input; its `Decision` or the `DecisionflowError` it raised, once its batch has run.

        `calibration` and `heads` are applied to the input's rubric; inputs of one `group` must share them.
        `timing`, when given, learns how long the input waited and how long its model call ran."""
        self.refuse_if_full()
        loop = asyncio.get_running_loop()
        item = _Waiting(group, target, calibration, heads, payload, cost, loop.create_future(), loop.time())
        self._queue.append(item)
        self.metrics.queue_depth.set(self.depth)
        assert self._wake is not None, "MicroBatcher.start() was not awaited"
        self._wake.set()
        with self.awaiting(target):
            try:
                outcome = await item.future  # cancelled with the request when its client disconnects
            except asyncio.CancelledError:
                item.abandoned = True  # the model thread's checkpoints read it
                self.metrics.cancelled.inc()
                raise
        if timing is not None:
            timing.add(item.waited, item.ran)
        return outcome

    # -- the dispatcher ---------------------------------------------------------------------------

    async def _dispatch(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._drop_cancelled()
            if not self._queue:
                self._wake.clear()
                if self._closing:
                    return
                continue
            if self.batching.enabled:
                # An idle model lets the first input wait a moment for company; a busy one already has it.
                delay = self._queue[0].since + self.batching.max_wait_ms / 1000 - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            batch = self._take_batch()
            self.metrics.queue_depth.set(self.depth)
            if batch:
                await self._run(batch)

    def _drop_cancelled(self) -> None:
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()

    def _take_batch(self) -> list[_Waiting]:
        """The oldest live input and the inputs of its group behind it, in order, within the token budget."""
        self._drop_cancelled()
        if not self._queue:
            return []
        group = self._queue[0].group
        batch: list[_Waiting] = []
        left: deque[_Waiting] = deque()
        used = 0
        full = False
        for item in self._queue:
            if item.future.done():
                continue
            fits = not batch or (self.batching.enabled and used + item.cost <= self.batching.token_budget)
            if item.group == group and not full and fits:
                batch.append(item)
                used += item.cost
            else:
                full = full or item.group == group
                left.append(item)
        self._queue = left
        return batch

    async def _run(self, batch: list[_Waiting]) -> None:
        now = asyncio.get_running_loop().time()
        for item in batch:
            item.waited = now - item.since
            self.metrics.queue_wait_seconds.observe(item.waited)
        self._running = batch  # left in place if the dispatcher dies in the call: `_dispatcher_ended` fails them
        await self._answer(batch)
        self._running = []

    async def _answer(self, batch: list[_Waiting]) -> None:
        outcomes = await self._call_model(batch)
        if isinstance(outcomes, Stopped):
            return  # every input of the call was abandoned: nobody waits for an answer
        if len(batch) > 1 and isinstance(outcomes, Exception):
            # Something failed the whole call: run the inputs one by one, so only the culprit fails.
            outcomes = [await self._call_model([item]) for item in batch]
            outcomes = [outcome if isinstance(outcome, Exception) else outcome[0] for outcome in outcomes]
        elif isinstance(outcomes, Exception):
            outcomes = [outcomes]
        for item, outcome in zip(batch, outcomes):
            if item.future.done():
                continue  # its client went away: the answer has nobody to go to
            if isinstance(outcome, DecisionflowError) and len(batch) > 1:
                outcome.input_index = None  # the index is the batch's, meaningless to the request
            item.future.set_result(outcome)

    async def _call_model(self, batch: list[_Waiting]) -> list[Any] | Exception:
        """One `decide_each` on the model thread: an outcome per input, or the error that failed the call."""
        first = batch[0]
        payloads = [item.payload for item in batch]
        options: dict[str, Any] = {"calibration": first.calibration}
        if first.heads is not None:  # passed only when there are some: zero-shot calls stay as they were
            options["heads"] = first.heads
        options["checkpoint"] = functools.partial(self._checkpoint, batch)
        loop = asyncio.get_running_loop()
        began = self._busy_since = time.perf_counter()
        try:
            return await loop.run_in_executor(
                self._model_thread, lambda: self.engine_for(first.target).decide_each(first.target, payloads, **options)
            )
        except Stopped as stopped:
            self.metrics.stopped.labels(phase=stopped.phase).inc()
            return stopped
        except Exception as error:  # noqa: BLE001 - a failed call fails its inputs, never the server
            return error
        finally:
            self._busy_since = None
            elapsed = time.perf_counter() - began
            for item in batch:
                item.ran += elapsed
            self.metrics.batch_size.observe(len(batch))
            self.metrics.batch_tokens.observe(sum(item.cost for item in batch))
            self.metrics.pass_seconds.observe(elapsed)

    def _checkpoint(self, batch: list[_Waiting], phase: str) -> None:
        """The engine's checkpoint for one call (on the model thread): stop once every input of the call is
        abandoned and, for the rubric's preparation (`prefix`, `prior`), once no other request waits for it."""
        if not all(item.abandoned for item in batch):
            return
        if phase != "pass" and self.awaited(batch[0].target):
            return  # a request still waits for this rubric: its prefix and prior are worth finishing
        raise Stopped(phase)


def preparation_key(target: Any) -> Hashable:
    """What a rubric's preparation is shared by: its content key (the target itself where it has none)."""
    return getattr(target, "key", target)
