"""A rubric's in-context examples on the bundled real model: written into the cached prefix as earlier
turns, in the engine's own answer layout, and part of what heads and caches are keyed on."""

from __future__ import annotations

import pytest

from decisionflow.errors import InputError
from decisionflow.fitting import fit_heads
from decisionflow.runtime.engine import Engine
from decisionflow.runtime.heads.fitted import HeadsError
from decisionflow.spec.rubric import Rubric

pytestmark = pytest.mark.model

FIELDS = {
    "department": {"kind": "choice", "question": "Which team handles the ticket", "options": ["billing", "shipping"]},
    "severity": {"kind": "score", "question": "How severe it is", "min": 0, "max": 3},
    "code": {"kind": "choice", "question": "Which code the ticket gets", "options": ["k1", "k2"]},
}
PLAIN = Rubric.model_validate({"name": "desk", "fields": FIELDS})
EXAMPLES = [
    {"text": "I was charged twice for one order", "answers": {"department": "billing", "severity": 2}},
    {"text": "Where is my parcel?", "answers": {"department": "shipping"}},
]
SHOWN = Rubric.model_validate({"name": "desk", "fields": FIELDS, "examples": EXAMPLES})
TICKET = "My card was billed two times this week"


def test_examples_are_written_into_the_prefix_before_the_input(engine: Engine):
    plain, _ = engine.compile(PLAIN)
    shown, _ = engine.compile(SHOWN)
    prefix = engine.tokenizer.decode(shown.prefix_tokens)
    assert len(shown.prefix_tokens) > len(plain.prefix_tokens)
    first, second = prefix.index(EXAMPLES[0]["text"]), prefix.index(EXAMPLES[1]["text"])
    assert first < second
    # Each example answered in the engine's own JSON layout, only the fields it gives, in plan order.
    assert prefix.index('"department": "billing"', first) < prefix.index('"severity": 2', first) < second
    answer = prefix[second:]
    assert '"department": "shipping"' in answer and '"severity"' not in answer
    # The request's own turn comes after the examples: the tail is unchanged.
    assert shown.request_tokens(TICKET)[-len(plain.request_tokens(TICKET)):] == plain.request_tokens(TICKET)


def test_a_rubric_with_examples_is_decided_from_its_own_cached_prefix(engine: Engine):
    plain = engine.decide(PLAIN, TICKET)
    shown = engine.decide(SHOWN, TICKET)
    assert shown.stats.prefix_tokens > plain.stats.prefix_tokens
    assert shown.stats.forward_passes == plain.stats.forward_passes
    for result in (plain, shown):
        assert result.fields["department"].value in ("billing", "shipping")
        assert sum(result.fields["severity"].probabilities.values()) == pytest.approx(1.0)
    # Another prompt: the model's reading of the same input moves.
    assert shown.fields["department"].probabilities != pytest.approx(plain.fields["department"].probabilities, abs=1e-4)
    again = engine.decide(SHOWN, TICKET)
    assert again.stats.prefix_cache_hit
    assert again.fields["department"].probabilities == pytest.approx(shown.fields["department"].probabilities, abs=1e-6)


def test_heads_fitted_without_the_examples_are_refused_with_them(engine: Engine):
    # Opaque answers (k1: billing, k2: shipping): zero-shot is near chance, so a head is fitted.
    rows = [(text, {"code": code}) for code, texts in (
        ("k1", ["I was charged twice", "refund my double charge", "the invoice is wrong", "my card was billed again"]),
        ("k2", ["no parcel yet", "tracking says lost", "the courier never came", "my order has not shipped"]),
    ) for text in texts]
    heads = fit_heads(engine, PLAIN, rows, significance=1.0).heads
    assert heads.fitted_fields == ["code"]
    engine.decide(PLAIN, TICKET, heads=heads)  # the rubric it was fitted for takes it
    with pytest.raises(HeadsError, match="another rubric|another version|another prompt"):
        engine.decide(SHOWN, TICKET, heads=heads)


def test_examples_longer_than_the_models_context_are_one_clear_error(engine: Engine):
    long_text = " ".join(["The parcel arrived late and the invoice listed an extra charge."] * 60)
    crowded = Rubric.model_validate({"name": "desk", "fields": FIELDS, "examples": [
        {"text": long_text, "answers": {"department": "billing"}} for _ in range(12)]})
    with pytest.raises(InputError, match=r"before any input, but the model's context holds \d+: .*in-context examples"):
        engine.decide(crowded, TICKET)
