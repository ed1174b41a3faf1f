"""The decision table shows each answer's own probability, and a runner-up that is not the answer."""

from __future__ import annotations

from rich.console import Console

from decisionflow.runtime.result import Decision, FieldResult, Stats
from decisionflow.spec.kinds import FieldKind


def _table_text(fields: dict[str, FieldResult]) -> str:
    stats = Stats(forward_passes=1, tokens_prefilled=10, input_tokens=5, prefix_tokens=5, prefix_cache_hit=True)
    console = Console(width=160, record=True, color_system=None)
    console.print(Decision(rubric="r", value=None, fields=fields, stats=stats))
    return console.export_text()


def _row(text: str, name: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.strip(" │┃").startswith(name + " "))
    return [cell.strip() for cell in line.strip().strip("│┃").split("│")]


def test_a_derived_answer_that_is_not_the_most_probable_value_shows_its_own_probability():
    # The rule applied to the decided answers gave `normal`, while the enumeration over the inputs'
    # distributions puts more weight on `urgent`.
    queue = FieldResult(name="queue", kind=FieldKind.CHOICE, value="normal",
                        probabilities={"urgent": 0.521, "normal": 0.479}, candidate_mass=None, round=2,
                        method="derived", derived_from="independent")
    row = _row(_table_text({"queue": queue}), "queue")
    assert row[1] == "normal"
    assert row[2] == "0.48"
    assert row[4] == "urgent 0.52"


def test_a_read_answer_shows_the_top_probability_and_the_second_best():
    urgent = FieldResult(name="urgent", kind=FieldKind.BOOLEAN, value=True,
                         probabilities={"true": 0.7, "false": 0.3}, candidate_mass=0.9, round=1, method="first_token")
    row = _row(_table_text({"urgent": urgent}), "urgent")
    assert row[1:3] == ["true", "0.70"]
    assert row[4] == "false 0.30"


def test_labels_that_look_like_markup_or_emoji_codes_are_shown_as_written():
    field = FieldResult(name="d", kind=FieldKind.CHOICE, value=":x:",
                        probabilities={":x:": 0.6, "[b]": 0.3, "[red]plain": 0.1}, candidate_mass=0.5, round=1,
                        method="first_token")
    row = _row(_table_text({"d": field}), "d")
    assert row[1] == ":x:"
    assert row[4] == "[b] 0.30"


def test_cli_lines_keep_emoji_codes_as_written():
    from decisionflow.cli.common import say

    console = Console(width=160, record=True, color_system=None)
    say(console, "OK errs/validator.py:V: v [b]")
    assert console.export_text().strip() == "OK errs/validator.py:V: v [b]"
