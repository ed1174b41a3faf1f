"""A rubric's `max_input_tokens`: the model reads at most that many tokens of each input, cut at a token
boundary and marked; the rubric keys (and so heads, calibrations and caches) as before when it is unset."""

from __future__ import annotations

import pydantic
import pytest

from decisionflow import decision
from decisionflow.compiler import compile_rubric
from decisionflow.compiler.compiled import CUT_MARK
from decisionflow.errors import InputError, RubricError
from decisionflow.spec.declare import rubric_of
from decisionflow.spec.rubric import Rubric
from decisionflow.spec.yaml_rubric import dump_rubric, loads_rubric

FIELDS = {
    "team": {"kind": "choice", "question": "Which team", "options": ["billing", "shipping"]},
    "urgent": {"kind": "boolean", "question": "Whether it is urgent"},
}
WHOLE = Rubric.model_validate({"name": "tickets", "fields": FIELDS})
LONG_TEXT = (
    "Héllo — I was charged twice for order 7781 (日本語のメモ付き) and the parcel never came. "
    "Please refund the duplicate charge and tell me where the parcel is. " * 40
)


def budgeted(budget: int) -> Rubric:
    return Rubric.model_validate({"name": "tickets", "fields": FIELDS, "max_input_tokens": budget})


@pytest.fixture(params=["smollm", "qwen"])
def tokenizer_of(request):
    return request.getfixturevalue("tokenizer" if request.param == "smollm" else "qwen_tokenizer")


def test_an_unset_budget_keys_the_rubric_as_before():
    assert "max_input_tokens" not in WHOLE.key
    assert "max_input_tokens" in budgeted(64).key and budgeted(64).key != budgeted(65).key


def test_a_budget_round_trips_through_yaml_and_the_decorator():
    rubric = budgeted(300)
    assert loads_rubric(dump_rubric(rubric)) == rubric
    assert "max_input_tokens" not in dump_rubric(WHOLE)

    @decision(max_input_tokens=300)
    class Tickets(pydantic.BaseModel):
        urgent: bool = pydantic.Field(description="Whether it is urgent")

    assert rubric_of(Tickets).max_input_tokens == 300


@pytest.mark.parametrize("bad", ["max_input_tokens: 0", "max_input_tokens: -5", "max_input_tokens: many",
                                 "max_input_tokens: 12\ninput_turns: true"])
def test_a_bad_budget_is_named(bad):
    text = "name: tickets\n" + bad + "\nfields:\n  urgent:\n    kind: boolean\n    question: Whether it is urgent\n"
    with pytest.raises(RubricError) as error:
        loads_rubric(text)
    assert "max_input_tokens" in str(error.value)


def test_a_short_input_is_read_whole(tokenizer_of):
    whole, cut = compile_rubric(tokenizer_of, WHOLE), compile_rubric(tokenizer_of, budgeted(64))
    text = "I was charged twice; refund the duplicate."
    assert cut.request_text(text) == whole.request_text(text)
    assert cut.request_tokens(text) == whole.request_tokens(text)


@pytest.mark.parametrize("budget", [1, 7, 64, 300])
def test_a_long_input_is_cut_at_its_budget(tokenizer_of, budget):
    whole, cut = compile_rubric(tokenizer_of, WHOLE), compile_rubric(tokenizer_of, budgeted(budget))
    text = cut.request_text(LONG_TEXT)
    assert text.endswith(CUT_MARK) and "\ufffd" not in text
    kept = text.removesuffix(CUT_MARK)
    assert LONG_TEXT.startswith(kept) and kept
    read = len(tokenizer_of(kept, add_special_tokens=False)["input_ids"])
    assert budget - 2 <= read <= budget  # a token's characters may merge with the next only at the cut's seam
    assert len(cut.request_tokens(LONG_TEXT)) < len(whole.request_tokens(LONG_TEXT))


def test_a_budget_lets_an_input_longer_than_the_context_be_decided(engine):
    context = engine.backend.max_positions
    text = "the parcel never came and I want my money back " * (context // 8)
    with pytest.raises(InputError, match="context"):
        engine.decide(WHOLE, text)
    decided = engine.decide(budgeted(48), text)
    assert decided.stats.input_tokens < 48 + 16
    assert set(decided.value.model_dump()) == {"team", "urgent"}
    same = engine.decide(budgeted(48), text[: len(text) // 4])
    assert same.fields["team"].probabilities == pytest.approx(decided.fields["team"].probabilities, abs=1e-6)
