"""The micro-batcher's bookkeeping, with a recording stand-in for the engine (answers are tested on the real
model elsewhere): grouping by rubric, the token budget, cancellation and a failing call."""

from __future__ import annotations

import asyncio
import threading

import pytest

from decisionflow.errors import InputError, Unavailable
from decisionflow.serve.batcher import MicroBatcher
from decisionflow.serve.metrics import Metrics
from decisionflow.serve.settings import Batching


class RecordingEngine:
    """Answers each payload with (target, payload); records every call; can be held or made to fail."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list]] = []
        self.release = threading.Event()
        self.release.set()
        self.started = threading.Event()

    def decide_each(self, target, payloads, calibration=None, checkpoint=None):
        self.started.set()
        self.release.wait(10)
        self.calls.append((target, list(payloads)))
        if "explode" in payloads:
            raise RuntimeError("a whole-call failure")
        return [InputError("empty") if p == "" else (target, p) for p in payloads]


def run(coroutine):
    return asyncio.run(coroutine)


async def started(engine, batching: Batching | None = None, max_queue=100) -> MicroBatcher:
    batching = batching or Batching(max_wait_ms=20)
    batcher = MicroBatcher(engine, batching, max_queue=max_queue, metrics=Metrics())
    await batcher.start()
    return batcher


def test_concurrent_inputs_of_one_rubric_share_a_call_and_each_gets_its_own_outcome():
    async def scenario():
        engine = RecordingEngine()
        batcher = await started(engine)
        outcomes = await asyncio.gather(*(batcher.decide("g", "rubric", f"text {i}", cost=10) for i in range(5)))
        await batcher.stop()
        return engine, outcomes

    engine, outcomes = run(scenario())
    assert outcomes == [("rubric", f"text {i}") for i in range(5)]
    assert engine.calls == [("rubric", [f"text {i}" for i in range(5)])]


def test_rubrics_are_never_mixed_in_a_call_and_the_oldest_goes_first():
    async def scenario():
        engine = RecordingEngine()
        batcher = await started(engine)
        tasks = [batcher.decide(group, group, f"{group}{i}", cost=1) for i, group in enumerate("abab")]
        outcomes = await asyncio.gather(*tasks)
        await batcher.stop()
        return engine, outcomes

    engine, outcomes = run(scenario())
    assert engine.calls == [("a", ["a0", "a2"]), ("b", ["b1", "b3"])]
    assert outcomes == [("a", "a0"), ("b", "b1"), ("a", "a2"), ("b", "b3")]


def test_the_token_budget_splits_calls_and_batching_off_sends_inputs_alone():
    async def scenario(batching):
        engine = RecordingEngine()
        batcher = await started(engine, batching)
        await asyncio.gather(*(batcher.decide("g", "r", i, cost=40) for i in range(5)))
        await batcher.stop()
        return [payloads for _, payloads in engine.calls]

    assert run(scenario(Batching(max_wait_ms=20, token_budget=100))) == [[0, 1], [2, 3], [4]]
    assert run(scenario(Batching(enabled=False))) == [[0], [1], [2], [3], [4]]


def test_a_bad_input_and_a_failing_call_fail_only_their_own_requests():
    async def scenario():
        engine = RecordingEngine()
        batcher = await started(engine)
        outcomes = await asyncio.gather(*(batcher.decide("g", "r", p, cost=1) for p in ("fine", "", "explode", "ok")))
        await batcher.stop()
        return engine, outcomes

    engine, outcomes = run(scenario())
    assert outcomes[0] == ("r", "fine") and outcomes[3] == ("r", "ok")
    assert isinstance(outcomes[1], InputError) and outcomes[1].input_index is None
    assert isinstance(outcomes[2], RuntimeError)
    assert engine.calls[1:] == [("r", ["fine"]), ("r", [""]), ("r", ["explode"]), ("r", ["ok"])]  # retried alone


def test_a_cancelled_input_leaves_the_queue_and_a_running_one_does_not_disturb_its_batch():
    async def scenario():
        engine = RecordingEngine()
        batcher = await started(engine, Batching(max_wait_ms=50))
        queued = asyncio.ensure_future(batcher.decide("g", "r", "leaves while queued", cost=1))
        stays = asyncio.ensure_future(batcher.decide("g", "r", "stays", cost=1))
        await asyncio.sleep(0)
        queued.cancel()
        assert await stays == ("r", "stays")
        engine.release.clear()
        engine.started.clear()
        running = asyncio.ensure_future(batcher.decide("g", "r", "leaves while running", cost=1))
        neighbour = asyncio.ensure_future(batcher.decide("g", "r", "neighbour", cost=1))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, 10)
        running.cancel()
        engine.release.set()
        answer = await neighbour
        await batcher.stop()
        return engine, answer, queued, running

    engine, answer, queued, running = run(scenario())
    assert queued.cancelled() and running.cancelled()
    assert answer == ("r", "neighbour")
    assert engine.calls == [("r", ["stays"]), ("r", ["leaves while running", "neighbour"])]


def test_a_full_queue_refuses_with_unavailable():
    async def scenario():
        engine = RecordingEngine()
        engine.release.clear()
        batcher = await started(engine, Batching(max_wait_ms=0), max_queue=2)
        first = asyncio.ensure_future(batcher.decide("g", "r", "running", cost=1))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, 10)
        waiting = [asyncio.ensure_future(batcher.decide("g", "r", f"waiting {i}", cost=1)) for i in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(Unavailable, match="at capacity"):
            await batcher.decide("g", "r", "one too many", cost=1)
        engine.release.set()
        await asyncio.gather(first, *waiting)
        await batcher.stop()

    run(scenario())


def test_the_full_queue_message_counts_grammatically():
    async def scenario(max_queue):
        engine = RecordingEngine()
        engine.release.clear()
        batcher = await started(engine, Batching(max_wait_ms=0), max_queue=max_queue)
        first = asyncio.ensure_future(batcher.decide("g", "r", "running", cost=1))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, 10)
        waiting = [asyncio.ensure_future(batcher.decide("g", "r", f"waiting {i}", cost=1)) for i in range(max_queue)]
        await asyncio.sleep(0)
        try:
            await batcher.decide("g", "r", "one too many", cost=1)
        except Unavailable as error:
            message = str(error)
        engine.release.set()
        await asyncio.gather(first, *waiting)
        await batcher.stop()
        return message

    assert "(1 input is waiting)" in run(scenario(1))
    assert "(2 inputs are waiting)" in run(scenario(2))
