"""The default catalog on the real model: a large field's options leave the prompt, not the answer set."""

from __future__ import annotations

import pytest

from decisionflow.runtime.engine import Engine, EngineOptions
from decisionflow.spec.rubric import Catalog, Rubric

pytestmark = pytest.mark.model

CITIES = ["paris", "rome", "madrid", "berlin", "vienna", "prague", "lisbon", "dublin", "oslo", "helsinki",
          "warsaw", "athens", "budapest", "brussels", "amsterdam", "copenhagen", "stockholm", "zurich",
          "geneva", "milan", "munich", "hamburg", "lyon", "porto", "seville", "krakow", "riga", "tallinn"]


def test_a_large_field_is_answered_from_its_trie_without_a_catalog(engine: Engine):
    rubric = Rubric.model_validate({
        "name": "cities",
        "fields": {"city": {"kind": "choice", "question": "Which city the traveller flies to", "options": CITIES}},
    })
    listed = Engine(engine.loaded, options=EngineOptions(catalog=Catalog.FULL))
    short, _ = engine.compile(rubric)
    full, _ = listed.compile(rubric)
    assert len(short.prefix_tokens) < len(full.prefix_tokens) - 50  # the 28 labels are not in the default prompt
    decided = engine.decide(rubric, "I land in Lisbon on Friday morning, where should I stay?")
    city = decided.fields["city"]
    assert city.value in CITIES and sum(city.probabilities.values()) == pytest.approx(1.0)
    assert set(city.probabilities) == set(CITIES)
