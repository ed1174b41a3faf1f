"""The engine's debiased readout on the bundled model: what each correction divides by, and who decides it."""

from __future__ import annotations

import math

import pytest

from decisionflow.errors import CalibrationError
from decisionflow.runtime.readout.debias import CONTENT_FREE_INPUTS, divide_by_prior
from decisionflow.spec.rubric import Rubric

REVIEW = "the cast is wonderful but the plot drags on forever"


def _rubric(**settings) -> Rubric:
    return Rubric.model_validate({
        "name": "review",
        "instructions": "Classify one sentence from a movie review.",
        "pin_first": True,
        "fields": {
            "sentiment": {"kind": "choice", "question": "The opinion of the film", "options": ["negative", "positive"]},
            "topic": {"kind": "choice", "question": "What the sentence is about",
                      "options": ["acting", "story", "music"], **settings.pop("topic", {})},
        },
        **settings,
    })


def _distribution(decision, field: str) -> tuple[float, ...]:
    """The field's probabilities in the order of its labels in `_rubric`."""
    probabilities = decision.fields[field].probabilities
    labels = {"sentiment": ("negative", "positive"), "topic": ("acting", "story", "music")}[field]
    return tuple(probabilities[label] for label in labels)


def _prior(engine, rubric: Rubric, field: str) -> tuple[float, ...]:
    readings = [_distribution(engine.decide(rubric, text, debias="none"), field) for text in CONTENT_FREE_INPUTS]
    return tuple(sum(column) / len(readings) for column in zip(*readings))


@pytest.mark.parametrize("method, strength", [("content_free", 1.0), ("content_free_half", 0.5)])
def test_a_content_free_correction_divides_the_raw_reading_by_the_content_free_prior(engine, method, strength):
    rubric = _rubric()
    raw = engine.decide(rubric, REVIEW, debias="none")
    corrected = engine.decide(rubric, REVIEW, debias=method)
    prior = _prior(engine, rubric, "sentiment")
    expected = divide_by_prior(_distribution(raw, "sentiment"), prior, strength)
    assert _distribution(corrected, "sentiment") == pytest.approx(expected, abs=1e-5)
    assert corrected.fields["sentiment"].debias == method
    # Abstention by mass judges the model's own mass, which no correction touches.
    assert corrected.fields["sentiment"].candidate_mass == pytest.approx(raw.fields["sentiment"].candidate_mass)


def test_half_strength_lies_half_way_between_raw_and_full_in_log_odds(engine):
    rubric = _rubric()
    logits = {}
    for method in ("none", "content_free_half", "content_free"):
        negative, positive = _distribution(engine.decide(rubric, REVIEW, debias=method), "sentiment")
        logits[method] = math.log(positive / negative)
    assert logits["content_free"] != pytest.approx(logits["none"], abs=1e-3)  # the model has a prior to remove
    assert logits["content_free_half"] == pytest.approx((logits["none"] + logits["content_free"]) / 2, abs=1e-4)


def test_the_call_overrides_the_field_which_overrides_the_rubric(engine):
    rubric = _rubric(debias="content_free", topic={"debias": "none"})
    decided = engine.decide(rubric, REVIEW)
    assert (decided.fields["sentiment"].debias, decided.fields["topic"].debias) == ("content_free", "none")
    overridden = engine.decide(rubric, REVIEW, debias="content_free_half")
    assert {f.debias for f in overridden.fields.values()} == {"content_free_half"}


def test_an_unknown_correction_is_refused_by_name(engine):
    with pytest.raises(CalibrationError, match="unknown readout correction 'bogus'.*content_free_half"):
        engine.decide(_rubric(), REVIEW, debias="bogus")
