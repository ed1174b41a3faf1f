"""A rubric compiled for one tokenizer: its prompt split around the input, its layout and its rows."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..errors import InputError
from ..spec.rubric import Rubric
from .inputs import render_input
from .layout import Layout, probe_layout
from .prompt import Catalog, PromptParts, render_prompt
from .tokens import TokenizerView
from .trie import CompiledField, ReadMode, compile_field


@dataclass(frozen=True)
class CompiledRubric:
    rubric: Rubric
    layout: Layout
    mode: ReadMode
    parts: PromptParts
    head_tokens: tuple[int, ...]
    fields: dict[str, CompiledField]
    view: TokenizerView

    @cached_property
    def positions_before_input(self) -> int:
        """Positions a request needs besides its input: head, every answer line, the deepest row."""
        answers = sum(max(len(line) for line in f.answer_lines) for f in self.fields.values())
        return len(self.head_tokens) + answers + max(f.row_depth for f in self.fields.values())

    def request_tokens(self, payload: Any) -> list[int]:
        """Tokens after the head for one request: its input and the tail that opens the JSON object."""
        text = render_input(payload)
        tokens = self.view.suffix_after(list(self.head_tokens), self.parts.head, text + self.parts.tail)
        if tokens is None:
            # The input's first characters merged with the head's last token: keep the cached head and
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


def compile_rubric(
    tokenizer: Any, rubric: Rubric, *, mode: ReadMode = ReadMode.BRANCH, view: TokenizerView | None = None,
    catalog: Catalog = Catalog.FULL,
) -> CompiledRubric:
    view = view or TokenizerView(tokenizer)
    layout = probe_layout(view, lambda lay: render_prompt(tokenizer, rubric, opener=lay.opener, catalog=catalog))
    parts = render_prompt(tokenizer, rubric, opener=layout.opener, catalog=catalog)
    anchor_ids = view.encode(parts.tail)
    fields = {
        spec.name: compile_field(
            view, spec, layout=layout, anchor=parts.tail, anchor_ids=anchor_ids,
            answer_format=rubric.answer_format, mode=mode,
        )
        for spec in rubric
    }
    head_tokens = tuple(view.encode(parts.head))
    if not head_tokens:
        raise InputError("the rendered head is empty")
    return CompiledRubric(rubric, layout, mode, parts, head_tokens, fields, view)
