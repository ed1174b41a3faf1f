"""The prompt: the rubric's catalog and the request's input, rendered by the model's own chat template.

The rendered text is split in two around the input: the **prefix** (system turn, catalog, `Input:`) is
identical for every request of a rubric, so its KV cache is computed once; the **tail** closes the
user turn and opens the assistant's JSON object, and is tokenised with each request's input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import InputError, ModelError
from ..spec.rubric import AnswerFormat, Catalog, FieldKind, FieldSpec, Rubric

_INPUT_SENTINEL = "\u2063INPUT\u2063"
_OPENER_SENTINEL = "\u2063OPEN\u2063"
# Fixed values for template variables some families inject (Llama 3 writes today's date into the
# system turn): a date that changes at midnight would silently invalidate the cached prefix.
_TEMPLATE_ARGS = {"enable_thinking": False, "date_string": "01 Jan 2026"}

PREAMBLE = (
    "Read the input and fill in a JSON object with exactly the keys listed below. "
    "Every value must be copied exactly from that key's allowed options."
)


DEFAULT_CATALOG = Catalog.AUTO
"""The catalog where neither the field nor the rubric names one (the engine's `EngineOptions.catalog`
default, and what `plan --tokens` counts with)."""

AUTO_FULL_MAX = 20
"""`auto` lists a field's options in full up to this many, and none above. Measured on the development
sets (docs/engine.md, "Catalog strategies"): dropping the catalog raised accuracy on the 77- and
150-label fields and lost on a 3-label one whose descriptions carry meaning; 20 lies between."""
AUTO_LABELS_MAX = AUTO_FULL_MAX
"""A labels-only band: empty, as labels-only was never the best strategy on any development set."""


def catalog_for(spec: FieldSpec, answer_format: AnswerFormat, catalog: Catalog) -> Catalog:
    """The catalog a field gets: its own setting over the one given (the rubric's or the engine's);
    `auto` by size: FULL up to `AUTO_FULL_MAX` options, LABELS up to `AUTO_LABELS_MAX`, NONE above.
    Ids need their list (the model must see which id is which)."""
    if spec.kind is not FieldKind.CHOICE or answer_format is AnswerFormat.IDS:
        return Catalog.FULL
    catalog = spec.catalog or catalog
    if catalog is Catalog.AUTO:
        count = len(spec.values)
        return Catalog.FULL if count <= AUTO_FULL_MAX else Catalog.LABELS if count <= AUTO_LABELS_MAX else Catalog.NONE
    return catalog


def answer_ids(count: int) -> list[str]:
    """Short ids for the `ids` answer format: A..Z, then AA, AB, ..."""
    letters = [chr(ord("A") + i) for i in range(26)]
    ids = list(letters)
    for first in letters:
        if len(ids) >= count:
            break
        ids.extend(first + second for second in letters)
    return ids[:count]


def value_literal(spec: FieldSpec, value: Any, answer_format: AnswerFormat) -> str:
    """The canonical JSON text of an allowed answer, as the catalog shows it and answers are written."""
    if spec.kind is FieldKind.BOOLEAN:
        return "true" if value else "false"
    if spec.kind is FieldKind.SCORE:
        return str(int(value))
    if answer_format is AnswerFormat.IDS:
        return json.dumps(answer_ids(len(spec.values))[spec.values.index(value)])
    return spec.literal_of(value) or json.dumps(value, ensure_ascii=False)


def entry_head(spec: FieldSpec) -> str:
    """A catalog entry's first words: its key and its question, ended once."""
    question = spec.question.rstrip(". ")
    # A question that ends in its own mark keeps it alone ("back?", not "back?.").
    return f'"{spec.name}": {question}' + ("" if question.endswith(("?", "!")) else ".")


def catalog_entry(spec: FieldSpec, answer_format: AnswerFormat, catalog: Catalog = Catalog.FULL) -> str:
    head = "- " + entry_head(spec)
    if spec.kind is FieldKind.BOOLEAN:
        return f"{head} Allowed: true | false"
    catalog = catalog_for(spec, answer_format, catalog)
    if catalog is Catalog.NONE:
        return head
    allowed = " | ".join(value_literal(spec, v, answer_format) for v in spec.values)
    described = [v for v in spec.values if spec.description_of(v)] if catalog is Catalog.FULL else []
    if spec.options_by is not None:
        lines = [f'{head} Allowed, by the answer of "{spec.options_by.field}":']
        for answer, options in spec.options_by.options.items():
            lines.append(f"    {answer}: " + " | ".join(value_literal(spec, label, answer_format) for label in options))
        lines += [f"    {value_literal(spec, v, answer_format)}: {spec.description_of(v)}" for v in described]
        return "\n".join(lines)
    if answer_format is AnswerFormat.IDS and spec.kind is FieldKind.CHOICE:
        ids = answer_ids(len(spec.values))
        lines = [f"{head} Answer with the id of the option. Allowed: {allowed}"]
        for key, value in zip(ids, spec.values):
            description = spec.description_of(value)
            lines.append(f"    {key}) {value}" + (f" \u2014 {description}" if description else ""))
        return "\n".join(lines)
    lines = [f"{head} Allowed: {allowed}"]
    for value in described:
        lines.append(f"    {value_literal(spec, value, answer_format)}: {spec.description_of(value)}")
    return "\n".join(lines)


def system_text(rubric: Rubric, catalog: Catalog = Catalog.FULL) -> str:
    catalog = rubric.catalog or catalog
    parts = [rubric.instructions.strip()] if rubric.instructions.strip() else []
    parts.append(PREAMBLE)
    # Derived fields are computed in code: the model never reads or writes them.
    asked = [spec for spec in rubric if spec.derive is None]
    parts.append("Keys:\n" + "\n".join(catalog_entry(s, rubric.answer_format, catalog) for s in asked))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class PromptParts:
    prefix: str
    """Everything before the input; identical for every request of the rubric."""
    tail: str
    """Everything after the input, ending with the opener of the JSON object."""
    opener: str = ""
    """The opener of the JSON object, which `tail` ends with."""
    before_input: tuple[dict[str, str], ...] = ()
    """The messages the prefix renders (the system turn, then the examples' turns): a conversation's own
    turns are rendered after them (`render_turns`)."""


def render_prompt(
    tokenizer: Any, rubric: Rubric, *, opener: str, catalog: Catalog = Catalog.FULL,
    examples: Sequence[tuple[str, str]] = (),
) -> PromptParts:
    """Render the rubric's prompt through the model's chat template and split it around the input.

    `examples`: in-context examples, (input text, the assistant's answer text) pairs, written in order
    as earlier (user, assistant) turns between the system turn and the real user turn, so they belong
    to the prefix (computed once per rubric). The user turn of an example is laid out like the real one
    (`Input:` and the text); the answer text is written verbatim (`compiled.example_answer` writes it
    in the engine's own JSON layout). Empty (the default): exactly the prompt without examples."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the tokenizer has no chat template; decisionflow needs an instruction-tuned chat model")
    # A rubric that reads turns takes the user's words as they are; data to judge is introduced as such.
    lead = "" if rubric.input_turns else "Input:\n"
    shown = []
    for text, answer in examples:
        if _has_marker(text) or _has_marker(answer):
            raise InputError("an in-context example contains the prompt's internal markers (U+2063 INPUT/OPEN)")
        shown += [{"role": "user", "content": lead + text}, {"role": "assistant", "content": answer}]
    before_input = ({"role": "system", "content": system_text(rubric, catalog)}, *shown)
    messages = [
        *before_input,
        {"role": "user", "content": lead + _INPUT_SENTINEL},
        {"role": "assistant", "content": _OPENER_SENTINEL},
    ]
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, continue_final_message=True, **_TEMPLATE_ARGS
    )
    if text.count(_INPUT_SENTINEL) != 1 or not text.endswith(_OPENER_SENTINEL):
        raise ModelError("the chat template did not render the conversation as expected (input or assistant turn missing)")
    prefix, tail = text.split(_INPUT_SENTINEL)
    return PromptParts(prefix=prefix, tail=tail[: -len(_OPENER_SENTINEL)] + opener, opener=opener, before_input=before_input)


def render_turns(tokenizer: Any, parts: PromptParts, turns: Sequence[dict[str, str]]) -> str:
    """A conversation's turns as the model's chat template writes them between the rubric's prefix and its
    tail, for a rubric that reads turns (`Rubric.input_turns`): the whole conversation is rendered after
    the prefix's messages and must begin with the prefix and end with the tail, so the cached prefix and the
    compiled answer lines read exactly what the template writes."""
    if any(_has_marker(turn["content"]) for turn in turns):
        raise InputError("the conversation contains the prompt's internal markers (U+2063 INPUT/OPEN)")
    messages = [*parts.before_input, *turns, {"role": "assistant", "content": _OPENER_SENTINEL}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True, **_TEMPLATE_ARGS)
    except Exception as error:  # noqa: BLE001 - a template refuses with whatever its author raised (jinja's TemplateError, ...)
        raise InputError(f"the model's chat template refuses this conversation: {str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
    closing = parts.tail[: len(parts.tail) - len(parts.opener)] + _OPENER_SENTINEL
    if not text.startswith(parts.prefix) or not text.endswith(closing) or len(text) < len(parts.prefix) + len(closing):
        raise InputError("the model's chat template writes this conversation differently from a conversation that "
                         "begins and ends with a user turn: begin it with a user message (after any system message) "
                         "and end it with one")
    return text[len(parts.prefix): len(text) - len(closing)]


def _has_marker(text: str) -> bool:
    return _INPUT_SENTINEL in text or _OPENER_SENTINEL in text
