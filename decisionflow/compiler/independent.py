"""Independent questions: each field read on its own after the input, in one packed pass.

A rubric read the shared way (`compiled.compile_rubric`) lists every field in its system turn and reads
them as keys of one JSON object, so a field's distribution depends on which other fields are asked
beside it. A question-set format that promises independence (`/v1/decisions`, `/v1/systemone`) is
read instead as one short conversation per question, all after one input:

    system     the rubric's instructions and the preamble (no catalog)                    } head: cached
    user       Input: <the input>                                                         } once per model
    assistant  <acknowledgement>                                                          } per request
    user       the question, with its allowed answers      } per question: the row's lead,
    assistant  {"key": <answer>                            } then the answer trie

The head does not name any question, so every question set shares it; the request's tokens end with
the acknowledgement's turn; each question's turn, its answer opener and its answer trie are one row
that sees the head, the input and itself only. Nothing is written after an answer, so no row ever reads
another question: a question's distribution is the same alone, among others, in any order (up to the
number format's rounding: the rows of one pass are summed in a different order).

The seam between the acknowledgement and a question's turn is where the chat template starts a new
turn: a special token in every template probed (ChatML, Llama 3, Gemma, Mistral), so the question's
tokens do not depend on the input. Answer lines are tokenised after the text that follows the row's
last special token, which makes compiling a new question set cost little whatever the questions' length.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import CompileError, ModelError
from ..spec.rubric import Catalog, FieldSpec, Rubric
from .compiled import CompiledRubric
from .layout import Layout, probe_layout
from .prompt import _TEMPLATE_ARGS, PromptParts, catalog_entry
from .tokens import TokenizerView
from .trie import CompiledField, ReadMode, TrieNode, compile_field

PREAMBLE = (
    "You answer questions about an input. The user gives the input, then asks one question about it. "
    "Answer with a JSON object holding only the key the question names, its value copied exactly from "
    "that key's allowed options."
)
ACKNOWLEDGEMENT = "I have read the input."
QUESTION_LEAD = "Fill in this key:\n"

_INPUT = "\u2063INPUT\u2063"
_QUESTION = "\u2063QUESTION\u2063"
_OPEN = "\u2063OPEN\u2063"


def system_text(rubric: Rubric) -> str:
    parts = [rubric.instructions.strip()] if rubric.instructions.strip() else []
    parts.append(PREAMBLE)
    return "\n\n".join(parts)


def question_text(spec: FieldSpec, rubric: Rubric, catalog: Catalog) -> str:
    """A question's turn: the key, its question and its allowed answers, as a shared catalog lists them."""
    return QUESTION_LEAD + catalog_entry(spec, rubric.answer_format, rubric.catalog or catalog)


def render_independent(tokenizer: Any, rubric: Rubric) -> tuple[PromptParts, str]:
    """The prompt split for independent reading: (head and request tail, the question turn's template).

    The template holds `_QUESTION` where a question's text goes and ends with `_OPEN`, where the answer
    object opens."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelError("the tokenizer has no chat template; decisionflow needs an instruction-tuned chat model")
    before = [{"role": "system", "content": system_text(rubric)}, {"role": "user", "content": "Input:\n" + _INPUT},
              {"role": "assistant", "content": ACKNOWLEDGEMENT}]
    read = tokenizer.apply_chat_template(before, tokenize=False, **_TEMPLATE_ARGS)
    asked = tokenizer.apply_chat_template(
        [*before, {"role": "user", "content": _QUESTION}, {"role": "assistant", "content": _OPEN}],
        tokenize=False, continue_final_message=True, **_TEMPLATE_ARGS,
    )
    if (read.count(_INPUT) != 1 or not asked.startswith(read) or asked[len(read):].count(_QUESTION) != 1
            or not asked.endswith(_OPEN)):
        raise ModelError("the chat template did not render a conversation of separate turns as expected "
                         "(the input, an answer, then a question): independent questions cannot be read with it")
    head, tail = read.split(_INPUT)
    parts = PromptParts(head=head, tail=tail, before_input=tuple(before[:1]))
    return parts, asked[len(read):]


def compile_independent(
    tokenizer: Any, rubric: Rubric, *, mode: ReadMode = ReadMode.BRANCH, view: TokenizerView | None = None,
    catalog: Catalog = Catalog.FULL,
) -> CompiledRubric:
    """Compile `rubric` for independent reading (see the module): each asked field a row of its own."""
    view = view or TokenizerView(tokenizer)
    parts, template = render_independent(tokenizer, rubric)
    turn = template[: -len(_OPEN)]
    tail_ids = view.encode(parts.tail)
    special = frozenset(getattr(tokenizer, "all_special_ids", ()))

    def question_parts(layout: Layout) -> PromptParts:
        return replace(parts, tail=_after_last_special(view, special, turn.replace(_QUESTION, "Fill in this key.")
                                                       + layout.opener)[1])

    layout = probe_layout(view, question_parts)
    fields: dict[str, CompiledField] = {}
    for spec in rubric:
        if spec.derive is not None:
            continue
        lead_text = turn.replace(_QUESTION, question_text(spec, rubric, catalog)) + layout.opener
        lead = view.suffix_after(tail_ids, parts.tail, lead_text)
        if lead is None:
            raise CompileError(f"fields.{spec.name}: the question's turn merges with the text before it in this "
                               "tokenizer; it cannot be read as a question of its own")
        anchor_ids, anchor = _after_last_special(view, special, lead_text)
        compiled = compile_field(view, spec, layout=layout, anchor=anchor, anchor_ids=anchor_ids,
                                 answer_format=rubric.answer_format, mode=mode)
        fields[spec.name] = with_lead(compiled, tuple(lead))
    head_tokens = tuple(view.encode(parts.head))
    if not head_tokens:
        raise CompileError("the rendered head is empty")
    return CompiledRubric(rubric, layout, mode, parts, head_tokens, fields, view)


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
