"""Independent questions: each field read on its own after the input, in one packed pass.

A rubric read the shared way (`compiled.compile_rubric`) lists every field in its system turn and reads
them as keys of one JSON object, so a field's distribution depends on which other fields are asked
beside it. A question-set format that promises independence (`/v1/decisions`, `/v1/systemone`) is
read instead as one question per row, every row after the same input:

    system     the rubric's instructions and the preamble (no question)     } prefix: cached, shared by every
    user       Input:                                                       } question set
               <the input>                                                  } per request
               Question:                                                    }
               the question. Allowed: a | b (and descriptions)              } per question: the row's lead,
    assistant  {"key": <answer>                                             } then its answer trie

The prefix names no question, so every question set with the same instructions shares it; the request's
tokens end with `Question:`; each question's text, the end of the user turn, the answer opener and the
answer trie are one row that sees the prefix, the input and itself only. Nothing is written after an
answer, so no row ever reads another question: a question's distribution is the same alone, among
others, in any order (up to the number format's rounding: a pass sums its rows in another order).

The seam between `Question:` and a question's text is a boundary no tokenizer merge crosses in the
vocabularies probed (SmolLM2, Qwen2.5): punctuation, then a space and the question's first word. It is
checked when a rubric is compiled, after inputs that end in the ways that move seams (a space, a
newline, a quote, a multi-byte character); where it is not a boundary the question gets a user turn of
its own after the input's (`TURNS`), whose seam is the template's turn marker, a special token. The
inline layout reads better: measured on the development sets, docs/engine.md, "Independent questions".
Answer lines are tokenised after the text that follows the row's last special token, so compiling a new
question set costs little whatever the questions' length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CompileError, ModelError
from ..spec.kinds import FieldKind
from ..spec.rubric import AnswerFormat, Catalog, FieldSpec, Rubric
from .compiled import CompiledRubric
from .layout import Layout, probe_layout
from .prompt import _TEMPLATE_ARGS, PromptParts, catalog_entry, catalog_for, entry_head, value_literal
from .tokens import TokenizerView
from .trie import CompiledField, ReadMode, TrieNode, compile_field

PREAMBLE = (
    "Read the input and fill in a JSON object with exactly the key the question names. Its value must be "
    "copied exactly from that key's allowed options."
)
SEPARATOR = "\n\nQuestion:"
"""Ends a request's tokens in the inline layout; each question's row begins right after it."""
ACKNOWLEDGEMENT = "I have read the input."
"""The assistant's turn between the input's turn and a question's own, in the turns layout."""
SEAM_PROBES = ("x", "x.", "x ", "x\n", "x\n\n", 'x"', "x:", "\u65e5\u672c", "\U0001F600")
"""Input endings the inline seam is checked after: a space, a newline, a quote, multi-byte characters."""

_INPUT = "\u2063INPUT\u2063"
_QUESTION = "\u2063QUESTION\u2063"
_OPEN = "\u2063OPEN\u2063"


@dataclass(frozen=True)
class QuestionLayout:
    """Where a question goes after the input (inside the input's user turn, or in a turn of its own), and
    how its row writes it."""

    name: str
    question_prefix: str
    """Written before a question's catalog entry (its question and allowed answers)."""
    names_key: bool
    """Whether the question names its key before its text, as a shared catalog does: the answer names it
    anyway, so the inline layout leaves it out (14 % fewer row tokens on the 28-question presets, no
    significant accuracy lost against the shared reading: docs/engine.md, "Independent questions")."""
    own_turn: bool = False
    """Whether each question is a user turn of its own after an acknowledging assistant turn."""
    bare_options: bool = False
    """Whether the row writes string options bare (`a | b`, not `"a" | "b"`) where that names each one
    unambiguously (`bare_options`): 8 % fewer row tokens on the 28-question presets, but SST-2 read
    significantly worse than with the quoted row (docs/engine.md, "Independent questions"): not a default."""


INLINE = QuestionLayout("inline", " ", names_key=False)
INLINE_BARE = QuestionLayout("inline-bare", " ", names_key=False, bare_options=True)
"""The inline row with string options bare: measured against INLINE, not a default (`bare_options`)."""
TURNS = QuestionLayout("turns", "Fill in this key:\n- ", names_key=True, own_turn=True)
DEFAULT_INLINE = INLINE
"""The inline layout a rubric is compiled with where its seam is a token boundary (`question_layout`)."""


def system_text(rubric: Rubric) -> str:
    parts = [rubric.instructions.strip()] if rubric.instructions.strip() else []
    parts.append(PREAMBLE)
    return "\n\n".join(parts)


def question_text(spec: FieldSpec, rubric: Rubric, catalog: Catalog, layout: QuestionLayout = INLINE) -> str:
    """A question as its row writes it: its question and its allowed answers as a shared catalog lists them
    (string options bare where the layout writes them so), after its key where the layout names it."""
    if layout.bare_options:
        entry = bare_entry(spec, rubric.answer_format, rubric.catalog or catalog)
    else:
        entry = catalog_entry(spec, rubric.answer_format, rubric.catalog or catalog).removeprefix("- ")
    return layout.question_prefix + (entry if layout.names_key else entry.removeprefix(f'"{spec.name}": '))


def bare_entry(spec: FieldSpec, answer_format: AnswerFormat, catalog: Catalog) -> str:
    """`catalog_entry` without its `- `, with string options bare where `bare_options` allows it. Anything else
    (yes/no questions, scores, ids, options by another field's answer) as the catalog writes it: a yes/no
    question's row without its `Allowed: true | false` read one answer for every input of two yes/no readings of
    the development sets (docs/engine.md, "Independent questions")."""
    catalog = catalog_for(spec, answer_format, catalog)
    bare = bare_options(spec, answer_format)
    if bare is None or spec.options_by is not None or catalog is Catalog.NONE:
        return catalog_entry(spec, answer_format, catalog).removeprefix("- ")
    described = [value for value in spec.values if spec.description_of(value)] if catalog is Catalog.FULL else []
    lines = [f"{entry_head(spec)} Allowed: " + " | ".join(bare[value] for value in spec.values)]
    lines += [f"    {bare[value]}: {spec.description_of(value)}" for value in described]
    return "\n".join(lines)


def bare_options(spec: FieldSpec, answer_format: AnswerFormat) -> dict[Any, str] | None:
    """Each option's bare text, where every option is a string whose JSON literal is only its quotes around
    it, none has a `|`, a quote or a backslash, and none reads as a number, a boolean or null (which the bare
    text would name instead): else None, and the options stay quoted. (A rubric already refuses empty options,
    line breaks and spaces at an option's ends.)"""
    if spec.kind is not FieldKind.CHOICE or answer_format is not AnswerFormat.LABELS:
        return None
    bare: dict[Any, str] = {}
    for value in spec.values:
        literal = value_literal(spec, value, answer_format)
        if not isinstance(value, str) or literal != json.dumps(value, ensure_ascii=False):
            return None
        if "|" in value or '"' in value or "\\" in value:
            return None
        try:
            json.loads(value)
        except ValueError:
            bare[value] = value
        else:
            return None  # "true", "3", "null": bare, they would read as another JSON value
    return bare


def render_independent(tokenizer: Any, rubric: Rubric, layout: QuestionLayout = INLINE) -> tuple[PromptParts, str]:
    """The prompt split for independent reading: (the prefix and the request's tail, the question's template).

    The template holds `_QUESTION` where a question's text goes and ends with `_OPEN`, where the answer
    object opens."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the tokenizer has no chat template; decisionflow needs an instruction-tuned chat model")
    system = {"role": "system", "content": system_text(rubric)}
    if not layout.own_turn:
        messages = [system, {"role": "user", "content": "Input:\n" + _INPUT + SEPARATOR + _QUESTION},
                    {"role": "assistant", "content": _OPEN}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, continue_final_message=True, **_TEMPLATE_ARGS)
        if text.count(_INPUT) != 1 or text.count(_QUESTION) != 1 or not text.endswith(_OPEN):
            raise ModelError("the chat template did not render the conversation as expected (input, question or "
                             "assistant turn missing)")
        prefix, rest = text.split(_INPUT)
        tail, template = rest.split(_QUESTION)
        return PromptParts(prefix=prefix, tail=tail, before_input=(system,)), _QUESTION + template
    before = [system, {"role": "user", "content": "Input:\n" + _INPUT}, {"role": "assistant", "content": ACKNOWLEDGEMENT}]
    read = tokenizer.apply_chat_template(before, tokenize=False, **_TEMPLATE_ARGS)
    asked = tokenizer.apply_chat_template(
        [*before, {"role": "user", "content": _QUESTION}, {"role": "assistant", "content": _OPEN}],
        tokenize=False, continue_final_message=True, **_TEMPLATE_ARGS,
    )
    if (read.count(_INPUT) != 1 or not asked.startswith(read) or asked[len(read):].count(_QUESTION) != 1
            or not asked.endswith(_OPEN)):
        raise ModelError("the chat template did not render a conversation of separate turns as expected "
                         "(the input, an answer, then a question): independent questions cannot be read with it")
    prefix, tail = read.split(_INPUT)
    return PromptParts(prefix=prefix, tail=tail, before_input=(system,)), asked[len(read):]


def question_layout(view: TokenizerView, rubric: Rubric) -> QuestionLayout:
    """The inline layout (`DEFAULT_INLINE`) where its seam is a token boundary after every probed input
    ending, else TURNS."""
    inline = DEFAULT_INLINE
    parts, template = render_independent(view.tokenizer, rubric, inline)
    row = template.replace(_QUESTION, ' A question.').removesuffix(_OPEN)
    for ending in SEAM_PROBES:
        before = view.encode(ending + parts.tail)
        after = view.suffix_after(view.encode(parts.tail), parts.tail, row)
        if after is None or view.encode(ending + parts.tail + row) != before + after:
            return TURNS
    return inline


def compile_independent(
    tokenizer: Any, rubric: Rubric, *, mode: ReadMode = ReadMode.BRANCH, view: TokenizerView | None = None,
    catalog: Catalog = Catalog.FULL,
) -> CompiledRubric:
    """Compile `rubric` for independent reading (see the module): each asked field a row of its own."""
    view = view or TokenizerView(tokenizer)
    chosen = question_layout(view, rubric)
    parts, template = render_independent(tokenizer, rubric, chosen)
    turn = template[: -len(_OPEN)]
    tail_ids = view.encode(parts.tail)
    special = frozenset(getattr(tokenizer, "all_special_ids", ()))

    def question_parts(layout: Layout) -> PromptParts:
        return replace(parts, tail=_after_last_special(view, special, turn.replace(_QUESTION, " A question.")
                                                       + layout.opener)[1])

    layout = probe_layout(view, question_parts)
    fields: dict[str, CompiledField] = {}
    for spec in rubric:
        if spec.derive is not None:
            continue
        lead_text = turn.replace(_QUESTION, question_text(spec, rubric, catalog, chosen)) + layout.opener
        lead = view.suffix_after(tail_ids, parts.tail, lead_text)
        if lead is None:
            raise CompileError(f"fields.{spec.name}: the question merges with the text before it in this "
                               "tokenizer; it cannot be read as a question of its own")
        anchor_ids, anchor = _after_last_special(view, special, lead_text)
        compiled = compile_field(view, spec, layout=layout, anchor=anchor, anchor_ids=anchor_ids,
                                 answer_format=rubric.answer_format, mode=mode)
        fields[spec.name] = with_lead(compiled, tuple(lead))
    prefix_tokens = tuple(view.encode(parts.prefix))
    if not prefix_tokens:
        raise CompileError("the rendered prefix is empty")
    return CompiledRubric(rubric, layout, mode, parts, prefix_tokens, fields, view)


def _after_last_special(view: TokenizerView, special: frozenset[int], text: str) -> tuple[list[int], str]:
    """The tokens of `text` after its last special token, and their text: what a line that follows `text`
    is tokenised after (a special token is a seam no merge crosses). All of `text` when it has none, or
    when the part after it does not tokenise back to the same tokens on its own."""
    ids = view.encode(text)
    last = max((i for i, token in enumerate(ids) if token in special), default=-1)
    if last < 0 or last == len(ids) - 1:
        return ids, text
    rest = ids[last + 1:]
    rest_text = view.decode(rest)
    if view.encode(rest_text) != rest or not text.endswith(rest_text):
        return ids, text
    return rest, rest_text


def with_lead(field: CompiledField, lead: tuple[int, ...]) -> CompiledField:
    """`field`'s row with `lead` (the question's turn) before its stem: a chain the trie hangs off, every
    position shifted past it. Nothing is written into the prompt once the field is answered."""
    shift = len(lead)
    nodes: list[TrieNode] = [field.root]
    while nodes:
        node = nodes.pop()
        if node.position >= 0:
            node.position += shift
        nodes.extend(node.children.values())
    parents = tuple(range(-1, shift - 1)) + tuple(p + shift if p >= 0 else shift - 1 for p in field.row_parents)
    return replace(
        field,
        stem=lead + field.stem,
        row_tokens=lead + field.row_tokens,
        row_parents=parents,
        read_positions=tuple(p + shift for p in field.read_positions),
        answer_lines=tuple(() for _ in field.answer_lines),
    )
