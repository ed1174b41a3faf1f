"""Grammar-constrained greedy generation (XGrammar): generation that cannot write invalid JSON.

The same prompt and generation loop as `generation.json_generate`, with every token constrained to
the rubric's JSON schema. Needs `xgrammar` (`pip install 'decisionflow[bench]'`).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from ..compiler.prompt import answer_ids
from ..errors import Unavailable
from ..spec.rubric import AnswerFormat, FieldKind, Rubric
from .generation import MethodResult, canonical_object_tokens, finish_generation, generate_until_closed

if TYPE_CHECKING:
    from ..runtime.engine import Engine

JSON_INDENT = 2
JSON_SEPARATORS = (",", ": ")


def json_schema(rubric: Rubric) -> dict[str, Any]:
    """The rubric as a JSON schema: enums of exact labels (or ids), booleans, enums of score levels.

    Every key is required and no other key is allowed; a conditional field may also be null, so the
    key order and layout stay fixed.
    """
    properties: dict[str, Any] = {}
    optional = rubric.optional_fields
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            allowed: list[Any] = [True, False]
        elif spec.kind is FieldKind.SCORE:
            allowed = list(spec.values)
        elif rubric.answer_format is AnswerFormat.IDS:
            allowed = answer_ids(len(spec.values))
        else:
            allowed = list(spec.values)
        if spec.name in optional:
            allowed.append(None)
        properties[spec.name] = {"enum": allowed}
    return {
        "type": "object",
        "properties": properties,
        "required": list(rubric.fields),
        "additionalProperties": False,
    }


def _prompt_without_opener(compiled: Any, payload: Any) -> list[int]:
    """prefix + input + tail with the JSON opener left out, for a grammar that writes it itself."""
    opener = compiled.layout.opener
    prefix = list(compiled.prefix_tokens)
    text = compiled.request_text(payload) + compiled.parts.tail[: -len(opener)]
    rest = compiled.view.suffix_after(prefix, compiled.parts.prefix, text)
    return prefix + (rest if rest is not None else compiled.view.encode(text))


class GrammarConstrained:
    """XGrammar-constrained greedy generation with a fixed layout.

    The grammar is compiled with `any_whitespace=False`, `indent=2` and separators `", "`/`": "`: the
    only whitespace allowed is the pretty-printed layout (newline + two spaces per key), so the model
    cannot pad. The prompt is decisionflow's, minus the JSON opener: the grammar writes the `{` itself
    (one extra generated token). Compiled grammars are kept per rubric.
    """

    def __init__(self, engine: Engine):
        try:
            import xgrammar
        except ImportError as exc:
            raise Unavailable(f"xgrammar is not installed ({exc}); pip install 'decisionflow[bench]'") from None
        self.xgr = xgrammar
        self.engine = engine
        info = xgrammar.TokenizerInfo.from_huggingface(engine.tokenizer, vocab_size=engine.loaded.model.config.vocab_size)
        self.compiler = xgrammar.GrammarCompiler(info)
        self._grammars: dict[str, Any] = {}

    def compiled_grammar(self, rubric: Rubric) -> Any:
        key = rubric.key
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._grammars[key] = self.compiler.compile_json_schema(
                json.dumps(json_schema(rubric)),
                any_whitespace=False,
                indent=JSON_INDENT,
                separators=JSON_SEPARATORS,
                strict_mode=True,
            )
        return grammar

    def __call__(self, target: Any, payload: Any, *, max_new_tokens: int | None = None) -> MethodResult:
        from xgrammar.contrib.hf import LogitsProcessor

        engine = self.engine
        compiled, _ = engine.compile(target)
        grammar = self.compiled_grammar(compiled.rubric)
        began = time.perf_counter()
        prompt_ids = _prompt_without_opener(compiled, payload)
        cap = max_new_tokens if max_new_tokens is not None else 2 * canonical_object_tokens(compiled)
        # One processor per generate call: it holds the matcher's state.
        new, closed, _ = generate_until_closed(engine, prompt_ids, opener="", max_new_tokens=cap, logits_processor=LogitsProcessor(grammar))
        text = engine.tokenizer.decode(new, skip_special_tokens=True)
        elapsed = (time.perf_counter() - began) * 1000
        return finish_generation("grammar_constrained", compiled.rubric, text, new, closed, cap, len(prompt_ids), elapsed)
