"""Where the newline between two JSON lines goes, probed per tokenizer rather than assumed.

How a JSON line meets its neighbours depends on the tokenizer (SmolLM2 glues the newline to the next
line's indentation, Qwen2.5 glues it to the comma), so each layout's seams are checked to be token
boundaries and the first that is wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import CompileError
from .tokens import TokenizerView


@dataclass(frozen=True)
class Layout:
    """Where the newline between two JSON lines goes: before each line or after it."""

    name: str
    opener: str
    newline_first: bool
    indent: str = "  "

    def line(self, key: str, value_text: str) -> str:
        body = f'{self.indent}"{key}": {value_text},'
        return "\n" + body if self.newline_first else body + "\n"


LAYOUTS = (
    Layout("newline_before_line", opener="{", newline_first=True),
    Layout("newline_after_line", opener="{\n", newline_first=False),
)


def probe_layout(view: TokenizerView, parts_for: Any) -> Layout:
    """Pick the first layout whose seams (tail | line | line | line) are token boundaries."""
    samples = [("alpha_key", "true"), ("beta_key", '"some_label"'), ("gamma_key", "7")]
    for layout in LAYOUTS:
        tail = parts_for(layout).tail
        text, cuts = tail, []
        for key, value in samples:
            cuts.append(len(text))
            text += layout.line(key, value)
        full = view.encode(text)
        if all(full[: len(ids)] == ids for ids in (view.encode(text[:c]) for c in cuts)):
            return layout
    raise CompileError(
        "no JSON layout tokenises cleanly for this tokenizer: the newline merges with the text on both "
        "sides of a line break"
    )
