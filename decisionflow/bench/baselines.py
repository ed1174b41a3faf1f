"""Comparison methods: the usual ways to get a rubric's answers from the same model, for the benchmark.

Each method takes the engine (for its loaded model, tokenizer and compiled rubric), a target (a
decorated class or a Rubric) and one input, and returns a `MethodResult`:

- `json_generate`: unconstrained greedy JSON generation from decisionflow's own prompt;
- `grammar_constrained`: the same, constrained token by token to the rubric's JSON schema (XGrammar);
- `per_field_prefill`: one full forward over head + input + the field's row, per field;
- `copied_prefix`: head + input prefilled once, the cache copied to one batch row per field;
- `pcd_rlcd`: the original parallel-constrained-decoding engine (PyPI `pcd-rlcd`), when installed.

The generation baselines read the answer only by parsing text, without repair: an output is valid
only if it is a JSON object with every required key and only allowed values. Plain generation lives
in `runtime.generation` (`decisionflow eval --baseline` uses it too).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ..compiler.inputs import render_input
from ..compiler.prompt import answer_ids
from ..compiler.tree import tree_depths
from ..errors import Unavailable
from ..runtime.backend import tree_visibility
from ..runtime.generation import (
    MethodResult,
    canonical_object_tokens,
    check_value,
    finish_generation,
    generate_until_closed,
    json_generate,
    parse_answer,
)
from ..runtime.loading import cache_root
from ..runtime.readout import read_field
from ..spec.rubric import AnswerFormat, FieldKind, Rubric, Value

__all__ = [
    "GrammarConstrained", "MethodResult", "PcdRlcd", "Unavailable", "copied_prefix", "json_generate",
    "json_schema", "parse_answer", "per_field_prefill",
]


# --------------------------------------------------------------------------------------------
# Grammar-constrained generation (XGrammar)

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
    """head + input + tail with the JSON opener left out, for a grammar that writes it itself."""
    opener = compiled.layout.opener
    head = list(compiled.head_tokens)
    text = render_input(payload) + compiled.parts.tail[: -len(opener)]
    rest = compiled.view.suffix_after(head, compiled.parts.head, text)
    return head + (rest if rest is not None else compiled.view.encode(text))


class GrammarConstrained:
    """XGrammar-constrained greedy generation with a fixed layout.

    The grammar is compiled with `any_whitespace=False`, `indent=2` and separators `", "`/`": "`: the
    only whitespace allowed is the pretty-printed layout (newline + two spaces per key), so the model
    cannot pad. The prompt is decisionflow's, minus the JSON opener: the grammar writes the `{` itself
    (one extra generated token). Compiled grammars are kept per rubric.
    """

    def __init__(self, engine: Any):
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


# --------------------------------------------------------------------------------------------
# Row scoring without decisionflow's packed passes


def _readout(compiled_field: Any, row_logprobs: dict[int, Any]) -> Value:
    reading = read_field(compiled_field, row_logprobs)
    best = max(range(len(compiled_field.values)), key=reading.probabilities.__getitem__)
    return compiled_field.values[best]


def per_field_prefill(engine: Any, target: Any, payload: Any) -> MethodResult:
    """One full forward per field over head + input + that field's row (no cache, no pinning).

    The row is the field's answer trie as decisionflow compiles it, attached with a tree mask, and
    read with decisionflow's readout, so answers differ from decisionflow only by pinning and by
    the lack of a shared cache: this isolates the cost of re-reading the prefix once per field.
    """
    import torch

    compiled, _ = engine.compile(target)
    backend = engine.backend
    began = time.perf_counter()
    prefix = list(compiled.head_tokens) + compiled.request_tokens(payload)
    size = len(prefix)
    values: dict[str, Value | None] = {}
    passes = fed = 0
    causal = torch.ones(size, size, dtype=torch.bool).tril_()
    for name, cf in compiled.fields.items():
        rows = len(cf.row_tokens)
        visible = torch.zeros(size + rows, size + rows, dtype=torch.bool)
        visible[:size, :size] = causal
        visible[size:, :size] = True
        visible[size:, size:] = tree_visibility(cf.row_parents)
        mask = torch.zeros(visible.shape, dtype=backend.dtype).masked_fill_(~visible, torch.finfo(backend.dtype).min)
        positions = list(range(size)) + [size + d for d in tree_depths(cf.row_parents)]
        with torch.inference_mode():
            out = backend.model.model(
                input_ids=torch.tensor([prefix + list(cf.row_tokens)], device=backend.device),
                attention_mask=mask[None, None].to(backend.device),
                position_ids=torch.tensor([positions], device=backend.device),
                use_cache=False,
            )
            hidden = out.last_hidden_state[0, [size + p for p in cf.read_positions]]
            logprobs = torch.log_softmax(backend.model.lm_head(hidden).float(), dim=-1)
        values[name] = _readout(cf, dict(zip(cf.read_positions, logprobs)))
        passes += 1
        fed += size + rows
    elapsed = (time.perf_counter() - began) * 1000
    return MethodResult("per_field_prefill", True, values, passes, fed, 0, elapsed)


def copied_prefix(engine: Any, target: Any, payload: Any) -> MethodResult:
    """Prefill head + input once, copy its cache to one batch row per field, run the rows as a batch.

    Each batch row holds one field's row (padded to the longest) over its own copy of the prefix
    cache; memory grows with fields x prefix. Two passes, no pinning, decisionflow's readout.
    """
    import torch
    from transformers import DynamicCache

    compiled, _ = engine.compile(target)
    backend = engine.backend
    model = backend.model
    began = time.perf_counter()
    prefix = list(compiled.head_tokens) + compiled.request_tokens(payload)
    size = len(prefix)
    fields = list(compiled.fields.values())
    width = max(len(cf.row_tokens) for cf in fields)
    with torch.inference_mode():
        cache = DynamicCache(config=backend.config)
        model.model(input_ids=torch.tensor([prefix], device=backend.device), cache=cache, use_cache=True)
        batch = len(fields)
        copied = DynamicCache(config=backend.config)
        for index, layer in enumerate(cache.layers):
            copied.update(layer.keys.repeat(batch, 1, 1, 1), layer.values.repeat(batch, 1, 1, 1), index)
        pad = compiled.fields[next(iter(compiled.fields))].row_tokens[0]
        ids = torch.full((batch, width), pad, dtype=torch.long)
        positions = torch.full((batch, width), size, dtype=torch.long)
        visible = torch.zeros(batch, width, size + width, dtype=torch.bool)
        visible[:, :, :size] = True
        for b, cf in enumerate(fields):
            rows = len(cf.row_tokens)
            ids[b, :rows] = torch.tensor(cf.row_tokens)
            positions[b, :rows] = torch.tensor([size + d for d in tree_depths(cf.row_parents)])
            visible[b, :rows, size : size + rows] = tree_visibility(cf.row_parents)
            # Padding tokens see only themselves and the prefix; nothing reads them.
            visible[b, rows:, size + rows :] = torch.eye(width - rows, dtype=torch.bool)
        mask = torch.zeros(visible.shape, dtype=backend.dtype).masked_fill_(~visible, torch.finfo(backend.dtype).min)
        out = model.model(
            input_ids=ids.to(backend.device),
            attention_mask=mask[:, None].to(backend.device),
            position_ids=positions.to(backend.device),
            cache=copied,
            use_cache=True,
        )
        values: dict[str, Value | None] = {}
        for b, cf in enumerate(fields):
            hidden = out.last_hidden_state[b, list(cf.read_positions)]
            logprobs = torch.log_softmax(model.lm_head(hidden).float(), dim=-1)
            values[cf.spec.name] = _readout(cf, dict(zip(cf.read_positions, logprobs)))
    elapsed = (time.perf_counter() - began) * 1000
    return MethodResult("copied_prefix", True, values, 2, size + batch * width, 0, elapsed)


# --------------------------------------------------------------------------------------------
# pcd-rlcd, the original parallel-constrained-decoding engine


def pcd_schema(rubric: Rubric, original: dict[str, Any] | None = None) -> dict[str, Any]:
    """The schema mapping pcd reads: booleans and enums (score levels become enums of their digits)."""
    if original is not None:
        return original
    schema: dict[str, Any] = {}
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            schema[spec.name] = {"type": "boolean", "description": spec.question}
        else:
            schema[spec.name] = {"type": "enum", "description": spec.question, "choices": [str(v) for v in spec.values]}
    return schema


class PcdRlcd:
    """pcd-rlcd's torch engine on the CPU, loading the converted copy of the same model.

    pcd builds its own ChatML prompt from the schema and input (catalog of field descriptions only),
    prefills it without head caching, then scores every field's first label token in one batch over
    copies of that cache: two passes per request. It reads `MODEL_ID` and `BACKEND` when imported.
    """

    def __init__(self, model_folder: str):
        os.environ["BACKEND"] = "torch"
        os.environ["MODEL_ID"] = model_folder
        try:
            from pcd_rlcd import engine_torch
            from pcd_rlcd.schema import StructuredSchema
        except ImportError as exc:
            raise Unavailable(f"pcd-rlcd is not installed ({exc}); pip install --no-deps pcd-rlcd") from None
        if engine_torch.MODEL_ID != model_folder:
            raise Unavailable(f"pcd-rlcd was already imported with MODEL_ID={engine_torch.MODEL_ID}")
        self.engine_torch = engine_torch
        self.schema_class = StructuredSchema
        self._schemas: dict[str, Any] = {}
        import contextlib
        import io

        with contextlib.redirect_stdout(io.StringIO()):
            _, self.tokenizer, _ = engine_torch.get_torch_engine()

    def __call__(self, rubric: Rubric, context: str, *, schema: dict[str, Any] | None = None) -> MethodResult:
        mapping = pcd_schema(rubric, schema)
        key = json.dumps(mapping, sort_keys=True)
        structured = self._schemas.get(key)
        if structured is None:
            structured = self._schemas[key] = self.schema_class(mapping, tokenizer=self.tokenizer)
        began = time.perf_counter()
        output = self.engine_torch.run_parallel_generation_torch(context, structured)
        elapsed = (time.perf_counter() - began) * 1000
        values: dict[str, Value | None] = {}
        for spec in rubric:
            raw = output["parsed_json"][spec.name]["value"]
            values[spec.name] = int(raw) if spec.kind is FieldKind.SCORE else raw
        prompt = (
            f"<|im_start|>system\nClassify JSON attributes:\n{structured.to_parallel_schema_str()}<|im_end|>\n"
            f"<|im_start|>user\n{context}<|im_end|>\n<|im_start|>assistant\n{{\n"
        )
        prompt_tokens = len(self.tokenizer.encode(prompt))
        valid, _, reason = _valid_values(rubric, values)
        return MethodResult(
            "pcd_rlcd", valid, values, 2, prompt_tokens, 0, elapsed, reason=reason,
            extra={"pcd_elapsed_ms": output["elapsed_ms"], "pcd_prefill_ms": output["prefill_ms"]},
        )


def _valid_values(rubric: Rubric, values: dict[str, Value | None]) -> tuple[bool, None, str]:
    for spec in rubric:
        ok, _, reason = check_value(spec, values.get(spec.name), AnswerFormat.LABELS)
        if not ok:
            return False, None, reason
    return True, None, ""


def converted_model_folder(engine: Any) -> str | None:
    """The HF folder the bundled GGUF model was converted to (what pcd's MODEL_ID can point to)."""
    name = engine.loaded.name
    if not name.startswith("bundled:"):
        return name if os.path.isdir(name) else None
    stem = name.split(":", 1)[1].rsplit(".gguf", 1)[0]
    folders = sorted((cache_root() / "models").glob(f"{stem}-*"))
    folders = [f for f in folders if (f / "config.json").is_file()]
    return str(folders[0]) if folders else None
