"""Catalog strategies: how much of each choice field's options the prompt lists (no model needed)."""

from __future__ import annotations

from decisionflow.compiler.prompt import AUTO_FULL_MAX, catalog_for, system_text
from decisionflow.runtime.engine import EngineOptions
from decisionflow.spec.rubric import AnswerFormat, Catalog, Rubric


def _rubric(options: int, **settings) -> Rubric:
    return Rubric.model_validate({
        "name": "catalogued",
        "fields": {
            "small": {"kind": "choice", "question": "Which colour", "options": {"red": "warm", "blue": "cold"}},
            "large": {"kind": "choice", "question": "Which item",
                      "options": {f"item_{i:03d}": f"description {i}" for i in range(options)}, **settings.pop("large", {})},
            "flag": {"kind": "boolean", "question": "Whether it is urgent"},
        },
        **settings,
    })


def test_auto_lists_small_fields_in_full_and_large_ones_not_at_all():
    assert EngineOptions().catalog is Catalog.AUTO
    for count, expected in ((AUTO_FULL_MAX, Catalog.FULL), (AUTO_FULL_MAX + 1, Catalog.NONE)):
        rubric = _rubric(count)
        assert catalog_for(rubric.field("large"), AnswerFormat.LABELS, Catalog.AUTO) is expected
        assert catalog_for(rubric.field("small"), AnswerFormat.LABELS, Catalog.AUTO) is Catalog.FULL
    text = system_text(_rubric(AUTO_FULL_MAX + 1), Catalog.AUTO)
    assert '"red" | "blue"' in text and '"red": warm' in text and "Allowed: true | false" in text
    assert "item_000" not in text and '- "large": Which item.' in text


def test_a_field_or_rubric_setting_beats_the_engine_default():
    rubric = _rubric(AUTO_FULL_MAX + 5, large={"catalog": "labels"})
    text = system_text(rubric, Catalog.AUTO)
    assert '"item_000" | "item_001"' in text and "description 0" not in text
    everything = system_text(_rubric(AUTO_FULL_MAX + 5, catalog="full"), Catalog.AUTO)
    assert '"item_024": description 24' in everything


def test_ids_are_always_listed_since_the_model_must_see_which_id_is_which():
    rubric = _rubric(AUTO_FULL_MAX + 5, answer_format="ids")
    assert catalog_for(rubric.field("large"), AnswerFormat.IDS, Catalog.NONE) is Catalog.FULL
    assert "item_024" in system_text(rubric, Catalog.NONE)
