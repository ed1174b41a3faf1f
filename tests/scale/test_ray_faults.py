"""Faults on the Ray path, without a cluster: a batch that fails as a whole falls back to one row at a
time (only the culprit gets an error), errors that concern the whole rubric still stop the run, actor
restarts and retries are bounded, and a run that stops says so plainly. The engine is the real one;
the fault is injected around it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from decisionflow.errors import CalibrationError, ClusterError
from decisionflow.scale.actor import ERROR_OUT, ID_OUT, RESULT_OUT, DecisionActor
from decisionflow.scale.dataset import RayOptions, actor_remote_args
from decisionflow.scale.files import _cluster_error
from decisionflow.spec.yaml_rubric import load_rubric

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
SENTIMENT = load_rubric(ROOT / "workflows" / "sentiment.yaml")
POISON = "this row exhausts the device"
TEXTS = ["a gorgeous, witty film", POISON, "dull and long", "the cast is wonderful"]


class FailingEngine:
    """The real engine, except that any call holding the poisoned row fails as a device would."""

    def __init__(self, engine, error: Exception | None = None):
        self.engine, self.error, self.calls = engine, error, []

    def decide_each(self, target, payloads, **options):
        self.calls.append(len(payloads))
        if self.error is not None:
            raise self.error
        if POISON in payloads:
            raise RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return self.engine.decide_each(target, payloads, **options)


def actor_over(engine) -> DecisionActor:
    actor = DecisionActor.__new__(DecisionActor)  # the constructor loads a model of its own
    actor.engine, actor.target, actor.calibration, actor.heads = engine, SENTIMENT, None, None
    actor.text_column, actor.id_column, actor.payload_is_json = "text", "id", False
    return actor


def test_a_batch_that_fails_as_a_whole_is_decided_one_row_at_a_time(engine):
    failing = FailingEngine(engine)
    table = actor_over(failing)({"id": np.array(["a", "b", "c", "d"]), "text": np.array(TEXTS)}).to_pydict()
    assert failing.calls == [4, 1, 1, 1, 1]
    assert table[ID_OUT] == ["a", "b", "c", "d"]
    assert table[ERROR_OUT][1] == "the engine failed on this row: RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB"
    assert table[RESULT_OUT][1] is None
    for index in (0, 2, 3):
        assert table[ERROR_OUT][index] is None
        plain = engine.decide(SENTIMENT, TEXTS[index]).to_dict()
        assert json.loads(table[RESULT_OUT][index])["value"] == plain["value"]


def test_an_error_about_the_whole_rubric_stops_the_run(engine):
    failing = FailingEngine(engine, CalibrationError("the calibration belongs to another rubric"))
    with pytest.raises(CalibrationError, match="another rubric"):
        actor_over(failing)({"id": np.array(["a", "b"]), "text": np.array(TEXTS[:2])})
    assert failing.calls == [2]  # not retried row by row: every row would fail the same way


def test_actor_restarts_and_batch_retries_are_bounded():
    assert actor_remote_args(RayOptions()) == {"max_restarts": 2, "max_task_retries": 2}
    bounded = actor_remote_args(RayOptions(max_restarts=0, max_task_retries=0, memory_per_actor=1 << 30))
    assert bounded == {"max_restarts": 0, "max_task_retries": 0, "memory": 1 << 30}


def test_a_run_that_stops_says_why_and_that_it_resumes(tmp_path):
    import ray.exceptions

    died = _cluster_error(ray.exceptions.ActorDiedError(), RayOptions(), written=7, output=tmp_path / "out.jsonl")
    assert isinstance(died, ClusterError)
    assert "ActorDiedError: The actor died unexpectedly" in str(died)
    assert "7 records written" in str(died) and "resumes" in str(died)
    refused = CalibrationError("the calibration belongs to another rubric")
    wrapped = ray.exceptions.RayTaskError("DecisionActor.__call__", "traceback", refused)
    assert _cluster_error(wrapped, RayOptions(), written=0, output=tmp_path / "out.jsonl") is refused
    # What Ray raises is the wrapper made an instance of the cause's class too: the cause is still what is said.
    assert _cluster_error(wrapped.as_instanceof_cause(), RayOptions(), written=0, output=tmp_path / "out.jsonl") is refused
