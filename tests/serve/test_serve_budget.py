"""Cost control for new `/v1/systemone` question sets: a budget per client answered with 429 and
`Retry-After` before anything is built or cached, sets already prepared never charged, a size limit
checked before a set is cached, and served rubrics never pushed out of the engine's cache."""

from __future__ import annotations

import pytest
from serve_client import Client, rubric_folder, running_app  # noqa: F401 - fixtures

from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.serve import Access, Limits, ServeSettings
from decisionflow.serve.budget import PreparationBudget

pytestmark = pytest.mark.model

KEYS = ("first-key-0123456789", "second-key-0123456789")


def question_set(word: str) -> dict:
    return {
        "state": "I was charged twice for my order, please refund one of the charges.",
        "questions": {
            "refund": {"type": "noul", "instructions": f"Does the customer ask for a refund? ({word})"},
            "team": {"type": "choice", "instructions": "Which team handles it",
                     "criteria": {"billing": "charges and invoices", "shipping": "delivery and parcels"}},
        },
    }


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_gives_a_burst_then_refills_at_its_rate():
    clock = Clock()
    budget = PreparationBudget(per_minute=6, burst=2, clock=clock)
    assert budget.charge("a") is None and budget.charge("a") is None
    assert budget.charge("a") == pytest.approx(10.0)  # 6 a minute: one every 10 s
    assert budget.charge("b") is None  # another client has a bucket of its own
    clock.now = 5.0
    assert budget.charge("a") == pytest.approx(5.0)
    clock.now = 10.0
    assert budget.charge("a") is None
    clock.now = 1000.0
    assert [budget.charge("a") for _ in range(3)][:2] == [None, None]  # refilled to the burst, never beyond


@pytest.fixture(scope="module")
def small_engine(engine) -> Engine:
    """The session's model, with room for only three prepared rubrics."""
    return Engine(engine.loaded, options=EngineOptions(max_prepared=3))


def test_new_question_sets_beyond_a_clients_budget_get_429_and_prepared_ones_never_do(small_engine, rubric_folder):
    limits = Limits(new_question_set_burst=2, new_question_sets_per_minute=0.5)
    settings = ServeSettings(limits=limits, access=Access(api_keys=KEYS))
    with running_app(small_engine, rubric_folder, settings) as (app, port):
        first, second = Client(port), Client(port)
        auth_1 = {"Authorization": f"Bearer {KEYS[0]}"}
        auth_2 = {"Authorization": f"Bearer {KEYS[1]}"}
        served = first.post("/v1/rubrics/tickets/decide", {"text": "Where is my parcel?"}, headers=auth_1)
        assert served.status == 200
        assert [first.post("/v1/systemone", question_set(w), headers=auth_1).status for w in ("one", "two")] == [200, 200]
        prepared_before = len(small_engine.prepared)
        refused = first.post("/v1/systemone", question_set("three"), headers=auth_1)
        assert refused.status == 429, refused.body
        assert refused.body["error"]["type"] == "TooManyQuestionSets"
        assert 1 <= int(refused.headers["retry-after"]) <= 120
        assert len(small_engine.prepared) == prepared_before  # nothing was compiled or cached for it
        # A set this client already asked is prepared: never charged.
        again = first.post("/v1/systemone", question_set("one"), headers=auth_1)
        assert again.status == 200 and again.body["answers"]["team"]["type"] == "choice"
        # Another key has its own budget.
        assert second.post("/v1/systemone", question_set("three"), headers=auth_2).status == 200
        assert second.post("/v1/systemone", question_set("four"), headers=auth_2).status == 200
        # Four question sets were prepared in an engine that keeps three rubrics: the served one stayed.
        tickets = app.state.service.registry.get("tickets").rubric
        assert tickets in small_engine.prepared
        metrics = first.get("/metrics", headers=auth_1).body
        assert 'decisionflow_rejected_total{reason="question_set_budget"} 1.0' in metrics
        assert "decisionflow_question_set_preparations_total 4.0" in metrics
        assert 'decisionflow_prepared_rubric_events_total{event="evicted"}' in metrics
        first.close()
        second.close()


def test_a_question_set_over_the_prefix_limit_is_refused_before_it_is_cached(engine, rubric_folder):
    fresh = Engine(engine.loaded)
    with running_app(fresh, rubric_folder, ServeSettings(limits=Limits(max_question_set_prefix_tokens=60))) as (app, port):
        client = Client(port)
        reply = client.post("/v1/systemone", question_set("long"))
        assert reply.status == 400, reply.body
        assert reply.body["error"]["field"] == "questions"
        assert "tokens before the input; at most 60 (max_question_set_prefix_tokens)" in reply.body["error"]["message"]
        assert len(fresh.prepared) == 0
        assert len(app.state.service.question_sets) == 0
        client.close()


def test_new_question_sets_arriving_together_reach_the_model_one_preparation_at_a_time(engine, rubric_folder):
    """However many new sets arrive at once, one first call at a time is queued for the model: a request of
    a prepared rubric waits behind at most one preparation."""
    import threading

    fresh = Engine(engine.loaded)
    with running_app(fresh, rubric_folder, ServeSettings(limits=Limits(new_question_set_burst=4))) as (app, port):
        service = app.state.service
        real_decide = service.batcher.decide
        in_queue, most = [0], [0]

        async def watched(group, target, payload, **options):
            preparing = fresh.prepared.peek(target) is None or fresh.prepared.peek(target).prefix is None
            in_queue[0] += preparing
            most[0] = max(most[0], in_queue[0])
            try:
                return await real_decide(group, target, payload, **options)
            finally:
                in_queue[0] -= preparing

        service.batcher.decide = watched
        statuses: list[int] = []
        start = threading.Barrier(4)

        def ask(word: str) -> None:
            client = Client(port)
            start.wait(30)
            statuses.append(client.post("/v1/systemone", question_set(word)).status)
            client.close()

        threads = [threading.Thread(target=ask, args=(word,)) for word in ("a", "b", "c", "d")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert statuses == [200] * 4
        assert most[0] == 1


def test_a_question_set_that_does_not_validate_costs_no_budget(engine, rubric_folder):
    settings = ServeSettings(limits=Limits(new_question_set_burst=1, new_question_sets_per_minute=0.001))
    with running_app(Engine(engine.loaded), rubric_folder, settings) as (_, port):
        client = Client(port)
        broken = question_set("broken")
        broken["questions"]["team"]["criteria"] = {"billing": None}  # one label: refused while it is built
        assert client.post("/v1/systemone", broken).status == 422
        assert client.post("/v1/systemone", broken).status == 422  # again: still refused for what it is, not 429
        assert client.post("/v1/systemone", question_set("valid")).status == 200  # the one preparation was still there
        assert client.post("/v1/systemone", question_set("another")).status == 429
        client.close()
