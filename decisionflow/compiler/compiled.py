"""A rubric compiled for one tokenizer: its prompt split around the input, its layout and its rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..spec.plan import make_plan
from ..spec.rubric import Rubric, label_of
from .inputs import conversation_turns, render_input
from .layout import Layout, probe_layout
from .prompt import Catalog, PromptParts, render_prompt, render_turns, value_literal
from .tokens import TokenizerView
from .trie import CompiledField, ReadMode, compile_field

CUT_MARK = "\n[cut]"
"""Ends an input the rubric's `max_input_tokens` cut, so the model reads that the text goes on."""


@dataclass(frozen=True)
class CompiledRubric:
    rubric: Rubric
    layout: Layout
    mode: ReadMode
    parts: PromptParts
    prefix_tokens: tuple[int, ...]
    fields: dict[str, CompiledField]
    """Every asked field (derived fields have none); an `options_by` field's over all its options."""
    view: TokenizerView
    subsets: dict[str, dict[str, CompiledField]] = field(default_factory=dict)
    """`options_by` fields: per parent answer (its label), the row offering that answer's options."""

    def row_for(self, name: str, parent_label: str | None = None) -> CompiledField | None:
        """The row to read for a field (for an `options_by` field, given its parent's answer; None when
        that answer offers no options)."""
        if name in self.subsets:
            return self.subsets[name].get(parent_label) if parent_label is not None else None
        return self.fields[name]

    @property
    def head_tokens(self) -> tuple[int, ...]:
        """Deprecated: the earlier name of `prefix_tokens`."""
        return self.prefix_tokens

    @cached_property
    def positions_before_input(self) -> int:
        """Positions a request needs besides its input: prefix, every answer line, the deepest row."""
        answers = sum(max(len(line) for line in f.answer_lines) for f in self.fields.values())
        return len(self.prefix_tokens) + answers + max(f.row_depth for f in self.fields.values())

    def request_text(self, payload: Any) -> str:
        """The text between the prefix and the tail for one request: its input as data (`render_input`), or,
        for a rubric that reads turns, the conversation (a text: one user turn) as the template's own turns."""
        if self.rubric.input_turns:
            return render_turns(self.view.tokenizer, self.parts, conversation_turns(payload))
        text = render_input(payload)
        budget = self.rubric.max_input_tokens
        if budget is not None:
            cut = self.view.cut(text, budget)
            if cut is not None:
                text = cut + CUT_MARK
        return text

    def request_tokens(self, payload: Any) -> list[int]:
        """Tokens after the prefix for one request: its text (`request_text`) and the tail that opens the JSON object."""
        text = self.request_text(payload)
        tokens = self.view.suffix_after(list(self.prefix_tokens), self.parts.prefix, text + self.parts.tail)
        if tokens is None:
            # The input's first characters merged with the prefix's last token: keep the cached prefix and
            # tokenise the input on its own (a seam the model still reads as a line break).
            tokens = self.view.encode(text + self.parts.tail)
        return tokens

    def token_view(self) -> dict[str, dict[str, Any]]:
        return {
            name: {
                "stem_tokens": len(f.stem),
                "row_tokens": f.row_length,
                "reads": len(f.read_positions),
                "method": f.method,
                "row_ends": self.view.decode(f.stem[-3:]),
            }
            for name, f in self.fields.items()
        }


Example = tuple[Any, str | Mapping[str, Any]]
"""An in-context example: an input (anything a request takes) and its answer, either the assistant's
answer text verbatim or a mapping of field to answer (written by `example_answer` in the probed layout)."""


def compile_rubric(
    tokenizer: Any, rubric: Rubric, *, mode: ReadMode = ReadMode.BRANCH, view: TokenizerView | None = None,
    catalog: Catalog = Catalog.FULL, examples: Sequence[Example] | None = None, pin_first: bool | None = None,
) -> CompiledRubric:
    """Compile `rubric` for `tokenizer`. `examples`: in-context examples written into the prefix as
    earlier (user, assistant) turns, in order (see `prompt.render_prompt`); None: the rubric's own
    (`Rubric.examples`, none unless it declares some). `pin_first`: the plan the examples' answers are
    written in (None: the rubric's), as the engine will write the request's."""
    view = view or TokenizerView(tokenizer)
    if examples is None:
        examples = [(example.text, example.answers) for example in rubric.examples]

    def shown(layout: Layout) -> list[tuple[str, str]]:
        return [(render_input(text), answer if isinstance(answer, str) else example_answer(layout, rubric, answer, pin_first=pin_first))
                for text, answer in examples]

    def render(layout: Layout) -> PromptParts:
        return render_prompt(tokenizer, rubric, opener=layout.opener, catalog=catalog, examples=shown(layout))

    layout = probe_layout(view, render)
    parts = render(layout)
    anchor_ids = view.encode(parts.tail)
    def compiled(spec: Any) -> CompiledField:
        return compile_field(
            view, spec, layout=layout, anchor=parts.tail, anchor_ids=anchor_ids,
            answer_format=rubric.answer_format, mode=mode,
        )

    fields = {spec.name: compiled(spec) for spec in rubric if spec.derive is None}
    subsets = {
        spec.name: {
            answer: compiled(spec.model_copy(update={"options": options_of(spec, answer), "options_by": None}))
            for answer in spec.options_by.options
        }
        for spec in rubric if spec.options_by is not None
    }
    prefix_tokens = tuple(view.encode(parts.prefix))
    if not prefix_tokens:
        raise InputError("the rendered prefix is empty")
    return CompiledRubric(rubric, layout, mode, parts, prefix_tokens, fields, view, subsets)


def options_of(spec: Any, parent_label: str) -> dict[str, str]:
    offered = spec.options_for_label(parent_label)
    assert offered is not None
    return offered


def example_answer(layout: Layout, rubric: Rubric, answers: Mapping[str, Any], *, pin_first: bool | None = None) -> str:
    """An example's answer as the engine writes it after the opener: every answered field's JSON line
    (`layout.line`, the trailing comma included) in the plan's order, then the closing brace.

    `answers` maps field names to allowed answers, as values or labels (`true`, `7`, `billing`); fields
    it leaves out (or maps to None) and derived fields are not written."""
    unknown = set(answers) - set(rubric.fields)
    if unknown:
        raise InputError(f"an in-context example answers unknown fields: {', '.join(sorted(unknown))}")
    text = layout.opener
    for name in (name for round_ in make_plan(rubric, pin_first=pin_first).rounds for name in round_.fields):
        answer = answers.get(name)
        if answer is None:
            continue
        spec = rubric.fields[name]
        by_label = dict(zip(spec.labels, spec.values))
        value = by_label.get(label_of(answer) if not isinstance(answer, str) else answer)
        if value is None:
            raise InputError(f"an in-context example answers {name!r} with {answer!r}, not one of its allowed answers")
        text += layout.line(name, value_literal(spec, value, rubric.answer_format))
    return text + ("\n}" if layout.newline_first else "}")
