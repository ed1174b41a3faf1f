"""What the engine promises a caller: errors that name their input, calibrations checked against the
rubric, user validators that fail one row only, bounded caches, one prefix prefill under concurrency,
and a model passed in left as it was."""

from __future__ import annotations

import threading
from typing import Annotated, Literal

import pytest
from pydantic import BaseModel, field_validator

from decisionflow.errors import (
    CalibrationError,
    DecisionflowError,
    InputError,
    ModelError,
    ResultError,
)
from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.runtime.readout.calibration import Calibration, FieldCalibration
from decisionflow.spec.declare import ask, decision
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

RUBRIC = Rubric.model_validate({
    "name": "contract",
    "fields": {
        "topic": {"kind": "choice", "question": "What the message is about", "options": ["delivery", "billing"]},
        "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
    },
})
TEXTS = ["My parcel is late.", "I was billed twice!", "Where is my order?"]


class Boom(Exception):
    """An exception whose constructor does not take one string."""

    def __init__(self, code: int, detail: str):
        super().__init__(code, detail)
        self.code = code


class Exploding(str):
    def strip(self, *args):  # render_input strips a text input: this is where it blows up
        raise Boom(7, "no")


def test_decide_many_names_the_bad_input_without_rebuilding_its_error(engine: Engine):
    with pytest.raises(InputError) as caught:
        engine.decide_many(RUBRIC, ["fine text", "   "])
    assert caught.value.input_index == 1 and str(caught.value).startswith("input 1: ")
    with pytest.raises(Boom) as boom:
        engine.decide_many(RUBRIC, ["fine text", Exploding("x")])
    assert boom.value.code == 7 and boom.value.args == (7, "no")
    assert "while reading input 1" in boom.value.__notes__


@pytest.mark.parametrize("one_input", ["My parcel is late.", b"late", {"text": "late"}])
def test_one_input_where_a_list_belongs_is_refused(engine: Engine, one_input):
    # Iterating it would decide each character (or key) as an input of its own.
    for method in (engine.decide_many, engine.decide_each):
        with pytest.raises(InputError, match=f"{method.__name__} takes a list of inputs"):
            method(RUBRIC, one_input)


@pytest.mark.parametrize("argument", [{"mode": "fast"}, {"debias": "nope"}, {"kernels": "x"}])
def test_engine_load_names_a_bad_argument_before_loading_the_model(monkeypatch, argument):
    import decisionflow.runtime.engine as engine_module

    monkeypatch.setattr(engine_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    (name, value), = argument.items()
    with pytest.raises(ModelError, match=f"Engine.load: unknown {name} {value!r}; use "):
        Engine.load(**argument)


def test_decide_each_returns_a_decision_or_an_error_per_input(engine: Engine):
    outcomes = engine.decide_each(RUBRIC, [TEXTS[0], "", TEXTS[1]])
    assert isinstance(outcomes[1], InputError) and outcomes[1].input_index == 1
    together = [outcomes[0], outcomes[2]]
    assert all(o.stats.batch_size == 2 for o in together)
    for text, decided in zip((TEXTS[0], TEXTS[1]), together):
        alone = engine.decide(RUBRIC, text)
        assert decided.value == alone.value
        assert decided.fields["topic"].probabilities == pytest.approx(alone.fields["topic"].probabilities, abs=1e-4)


def test_a_calibration_for_another_rubric_is_refused(engine: Engine):
    with pytest.raises(CalibrationError, match="is for rubric 'other'"):
        engine.decide(RUBRIC, TEXTS[0], calibration=Calibration(rubric="other"))
    unknown_field = Calibration(rubric="contract", fields={"tone": FieldCalibration(temperature=2.0)})
    with pytest.raises(CalibrationError, match="field 'tone'"):
        engine.decide(RUBRIC, TEXTS[0], calibration=unknown_field)
    other_labels = Calibration(rubric="contract", fields={"topic": FieldCalibration(labels=("delivery", "returns"))})
    with pytest.raises(CalibrationError, match="fitted for labels delivery, returns"):
        engine.decide(RUBRIC, TEXTS[0], calibration=other_labels)
    same_labels = Calibration(rubric="contract", fields={"topic": FieldCalibration(labels=("billing", "delivery"))})
    assert engine.decide(RUBRIC, TEXTS[0], calibration=same_labels).fields["topic"].asked


@decision(instructions="Route one message.")
class Picky(BaseModel):
    topic: Annotated[Literal["delivery", "billing"], ask("What the message is about")]
    urgent: Annotated[bool, ask("Whether it is urgent")]

    @field_validator("urgent")
    @classmethod
    def _never(cls, value: bool) -> bool:
        raise ValueError("urgency is decided by a human")


@decision(instructions="Route one message.")
class Crashing(BaseModel):
    topic: Annotated[Literal["delivery", "billing"], ask("What the message is about")]

    @field_validator("topic")
    @classmethod
    def _crash(cls, value: str) -> str:
        raise RuntimeError("validator bug")


def test_a_validator_that_refuses_the_answers_fails_that_input_only(engine: Engine):
    outcomes = engine.decide_each(Picky, TEXTS[:2])
    assert all(isinstance(o, ResultError) for o in outcomes)
    assert "urgency is decided by a human" in str(outcomes[0]) and outcomes[1].input_index == 1
    with pytest.raises(ResultError, match="Picky refused the decided answers"):
        engine.decide(Picky, TEXTS[0])
    crashed = engine.decide_each(Crashing, TEXTS[:1])[0]
    assert isinstance(crashed, ResultError) and "RuntimeError: validator bug" in str(crashed)


def test_prepared_rubrics_are_bounded(engine: Engine):
    small = Engine(engine.loaded, options=EngineOptions(max_prepared=2))
    rubrics = [Rubric.model_validate({**RUBRIC.model_dump(), "name": f"copy_{i}"}) for i in range(3)]
    for rubric in rubrics:
        small.decide(rubric, TEXTS[0])
    assert len(small.prepared) == 2
    assert [p.compiled.rubric.name for p in small.prepared.values()] == ["copy_1", "copy_2"]
    tight = Engine(engine.loaded, options=EngineOptions(max_prefix_bytes=1))
    for rubric in rubrics:
        tight.decide(rubric, TEXTS[0])
    assert [p.compiled.rubric.name for p in tight.prepared.values()] == ["copy_2"]  # the one in use stays
    # What the cache did, as the server's metrics read it: three rubrics prepared (each with one prefix
    # prefill and the content-free prior read through the same cache), two evicted, the rest hits.
    assert (tight.prepared.counts.prepared, tight.prepared.counts.prefixes_prefilled, tight.prepared.counts.evicted) == (3, 3, 2)
    assert tight.prepared.counts.hits > 0
    assert rubrics[2] in tight.prepared and rubrics[0] not in tight.prepared
    assert tight.prepared.prefix_bytes == next(iter(tight.prepared.values())).prefix_bytes > 0


def test_the_request_that_prepares_a_rubric_counts_the_preparation_in_its_total(engine: Engine):
    fresh = Engine(engine.loaded, options=EngineOptions(max_prepared=2))
    rubric = Rubric.model_validate({**RUBRIC.model_dump(), "name": "timed"})
    first, second = fresh.decide(rubric, TEXTS[0]), fresh.decide(rubric, TEXTS[1])
    timings = first.stats.timings_ms
    preparation = [key for key in timings if key.startswith(("compile", "prefix_", "prior_"))]
    assert not first.stats.prefix_cache_hit and "compile" in preparation and any(k.startswith("prefix_") for k in preparation)
    assert timings["total"] >= timings["passes"] + sum(timings[key] for key in preparation)
    assert second.stats.prefix_cache_hit and set(second.stats.timings_ms) == {"total", "passes"}
    assert second.stats.timings_ms["total"] >= second.stats.timings_ms["passes"]


def test_a_decorated_class_is_looked_up_in_the_prepared_rubrics_as_decide_takes_it(engine: Engine):
    @decision
    class Looked(BaseModel):
        topic: Annotated[Literal["delivery", "billing"], ask("What the message is about")]

    fresh = Engine(engine.loaded, options=EngineOptions(max_prepared=2))
    assert Looked not in fresh.prepared
    fresh.decide(Looked, TEXTS[0])
    assert Looked in fresh.prepared and RUBRIC not in fresh.prepared


def test_pinned_rubrics_stay_and_a_refused_rubric_is_not_kept(engine: Engine):
    small = Engine(engine.loaded, options=EngineOptions(max_prepared=1))
    served = Rubric.model_validate({**RUBRIC.model_dump(), "name": "served"})
    small.prepared.pin(served)
    small.decide(served, TEXTS[0])
    others = [Rubric.model_validate({**RUBRIC.model_dump(), "name": f"other_{i}"}) for i in range(3)]
    for rubric in others:
        small.decide(rubric, TEXTS[0])
    assert served in small.prepared and others[-1] in small.prepared  # the pinned one and the one in use
    assert others[0] not in small.prepared

    def too_long(prepared) -> None:
        if len(prepared.compiled.prefix_tokens) > 10:
            raise InputError(f"prefix of {len(prepared.compiled.prefix_tokens)} tokens")

    extra = Rubric.model_validate({**RUBRIC.model_dump(), "name": "extra"})
    with pytest.raises(InputError, match="prefix of"):
        small.prepared.get(extra, check=too_long)
    assert extra not in small.prepared and small.prepared.counts.prepared == 4


def test_first_use_from_two_threads_prefills_the_prefix_once(engine: Engine):
    fresh = Engine(engine.loaded)
    calls = []
    prefill = fresh.backend.prefill_prefix

    def counting(tokens):
        calls.append(len(tokens))
        return prefill(tokens)

    fresh.backend.prefill_prefix = counting  # type: ignore[method-assign]
    results: list = [None, None]
    start = threading.Barrier(2)

    def work(slot: int) -> None:
        start.wait()
        results[slot] = fresh.decide(RUBRIC, TEXTS[slot])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(fresh.prepared) == 1
    # Exactly one of the two first requests reports what preparing the rubric cost.
    assert sorted(r.stats.prefix_cache_hit for r in results) == [False, True]
    for slot in range(2):
        assert results[slot].value == engine.decide(RUBRIC, TEXTS[slot]).value


def test_an_engine_leaves_the_model_and_transformers_as_they_were(transformers_engine: Engine):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    engine = transformers_engine  # a transformers model handed to an engine, as a user may
    model = engine.loaded.model
    keys_before = set(ALL_ATTENTION_FUNCTIONS.keys())
    implementation = model.config._attn_implementation
    modules = {name: type(module) for name, module in model.named_modules()}
    Engine(engine.loaded).decide(RUBRIC, TEXTS[0])
    assert set(ALL_ATTENTION_FUNCTIONS.keys()) == keys_before
    assert not any("decisionflow" in key for key in keys_before)
    assert model.config._attn_implementation == implementation
    assert {name: type(module) for name, module in model.named_modules()} == modules


def test_every_error_is_a_decisionflow_error():
    from decisionflow.errors import (
        CompileError,
        DataError,
        ModelError,
        RubricError,
        Unavailable,
        outcome_of,
    )

    for cls in (RubricError, InputError, ResultError, CalibrationError, DataError, CompileError, ModelError, Unavailable):
        assert issubclass(cls, DecisionflowError)
    assert issubclass(RubricError, ValueError) and issubclass(InputError, ValueError)
    assert outcome_of(InputError("x")).http_status == 422
    assert outcome_of(Unavailable("x")).http_status == 503
    assert outcome_of(ModelError("x")).exit_code == 1
