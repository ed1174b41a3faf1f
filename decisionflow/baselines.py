"""Comparison methods: the usual ways to get a rubric's answers from the same model, for the benchmark.

Each method takes the engine (for its loaded model, tokenizer and compiled rubric), a target (a
decorated class or a Rubric) and one input, and returns a `MethodResult`:

- `json_generate`: unconstrained greedy JSON generation from decisionflow's own prompt;
- `grammar_constrained`: the same, constrained token by token to the rubric's JSON schema (XGrammar);
- `per_field_prefill`: one full forward over head + input + the field's row, per field;
- `copied_prefix`: head + input prefilled once, the cache copied to one batch row per field;
- `pcd_rlcd`: the original parallel-constrained-decoding engine (PyPI `pcd-rlcd`), when installed.

The generation baselines read the answer only by parsing text, without repair: an output is valid
only if it is a JSON object with every required key and only allowed values.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .rubric import AnswerFormat, FieldKind, FieldSpec, Rubric, Value


@dataclass
class MethodResult:
    method: str
    valid: bool
    values: dict[str, Value | None] | None
    """Field name -> answer (label string, bool or int); None when the output was not valid."""
    forward_passes: int
    prompt_tokens: int
    generated_tokens: int
    latency_ms: float
    text: str | None = None
    """The generated JSON text, for the generation baselines."""
    reason: str = ""
    """Why an output is invalid, or why a method did not run."""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Unavailable(RuntimeError):
    """A method cannot run on this machine (a missing optional package); the reason says why."""


# --------------------------------------------------------------------------------------------
# Parsing generated JSON


def _ids_to_labels(spec: FieldSpec) -> dict[str, Value]:
    from .prompt import answer_ids

    return dict(zip(answer_ids(len(spec.values)), spec.values))


def _check_value(spec: FieldSpec, raw: Any, answer_format: AnswerFormat) -> tuple[bool, Value | None, str]:
    if spec.kind is FieldKind.BOOLEAN:
        if isinstance(raw, bool):
            return True, raw, ""
        return False, None, f"{spec.name}: {raw!r} is not a JSON boolean"
    if spec.kind is FieldKind.SCORE:
        if isinstance(raw, int) and not isinstance(raw, bool) and spec.min <= raw <= spec.max:  # type: ignore[operator]
            return True, raw, ""
        return False, None, f"{spec.name}: {raw!r} is not an integer in {spec.min}..{spec.max}"
    if not isinstance(raw, str):
        return False, None, f"{spec.name}: {raw!r} is not a string label"
    if answer_format is AnswerFormat.IDS:
        labels = _ids_to_labels(spec)
        if raw in labels:
            return True, labels[raw], ""
        return False, None, f"{spec.name}: {raw!r} is not an allowed id"
    if raw in spec.values:
        return True, raw, ""
    return False, None, f"{spec.name}: {raw!r} is not an allowed label"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def parse_answer(rubric: Rubric, text: str) -> tuple[bool, dict[str, Value | None] | None, str]:
    """Parse one generated JSON object strictly: `(valid, values, reason)`.

    Valid means: the text starts with one JSON object (anything after its closing brace is ignored,
    since generation stops on the token that closes it), with no duplicate or unknown keys, every
    unconditional field present, and every value allowed (JSON booleans, integers in range, exact
    labels). Fields with a `when` condition may be absent or null. Nothing is repaired.
    """
    try:
        data, _ = json.JSONDecoder(object_pairs_hook=_no_duplicates).raw_decode(text.lstrip())
    except ValueError as exc:
        return False, None, f"not JSON: {exc}"
    if not isinstance(data, dict):
        return False, None, f"not a JSON object but {type(data).__name__}"
    unknown = [key for key in data if key not in rubric.fields]
    if unknown:
        return False, None, f"unknown key {unknown[0]!r}"
    values: dict[str, Value | None] = {}
    for spec in rubric:
        if spec.name not in data or data[spec.name] is None:
            if spec.when is None:
                return False, None, f"missing key {spec.name!r}"
            values[spec.name] = None
            continue
        ok, value, reason = _check_value(spec, data[spec.name], rubric.answer_format)
        if not ok:
            return False, None, reason
        values[spec.name] = value
    return True, values, ""


# --------------------------------------------------------------------------------------------
# Shared helpers for the generation baselines


class _BraceTracker:
    """Follows JSON brace depth through decoded text, ignoring braces inside strings."""

    def __init__(self, depth: int = 0):
        self.depth = depth
        self.in_string = False
        self.escaped = False
        self.closed = False

    def feed(self, text: str) -> None:
        for char in text:
            if self.closed:
                return
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.closed = True


def _object_closed_criterion(tokenizer: Any, opener: str) -> Any:
    """A StoppingCriteria that ends generation on the token that closes the JSON object."""
    from transformers import StoppingCriteria

    class ObjectClosed(StoppingCriteria):
        def __init__(self) -> None:
            self.tracker = _BraceTracker()
            self.tracker.feed(opener)
            self.seen = 0

        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            import torch

            # Decoding token by token is enough here: braces and quotes are single-byte characters.
            self.tracker.feed(tokenizer.decode(input_ids[0, -1:].tolist(), skip_special_tokens=True))
            self.seen += 1
            return torch.full((input_ids.shape[0],), self.tracker.closed, dtype=torch.bool, device=input_ids.device)

    return ObjectClosed()


def canonical_object_tokens(compiled: Any) -> int:
    """Token length of a complete JSON answer: the opener, each field's longest answer line, the close."""
    view = compiled.view
    lines = sum(max(len(line) for line in f.answer_lines) for f in compiled.fields.values())
    return len(view.encode(compiled.layout.opener)) + lines + len(view.encode("\n}"))


def _generate(
    engine: Any,
    prompt_ids: list[int],
    *,
    opener: str,
    max_new_tokens: int,
    logits_processor: Any = None,
) -> tuple[list[int], bool, float]:
    """Greedy generation until the object closes; returns (new tokens, closed, milliseconds)."""
    import torch
    from transformers import LogitsProcessorList, StoppingCriteriaList

    model, tokenizer = engine.loaded.model, engine.tokenizer
    stop = _object_closed_criterion(tokenizer, opener)
    ids = torch.tensor([prompt_ids], device=engine.backend.device)
    began = time.perf_counter()
    with torch.inference_mode():
        output = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=max_new_tokens,
            stopping_criteria=StoppingCriteriaList([stop]),
            logits_processor=LogitsProcessorList([logits_processor]) if logits_processor is not None else None,
            pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
            temperature=None,
            top_p=None,
            top_k=None,
        )
    elapsed = (time.perf_counter() - began) * 1000
    new = output[0, len(prompt_ids):].tolist()
    return new, stop.tracker.closed, elapsed


def _finish(method: str, rubric: Rubric, text: str, new: list[int], closed: bool, cap: int,
            prompt_tokens: int, elapsed_ms: float) -> MethodResult:
    if not closed and len(new) >= cap:
        valid, values, reason = False, None, f"hit the cap of {cap} new tokens before the object closed"
    else:
        valid, values, reason = parse_answer(rubric, text)
    return MethodResult(
        method=method, valid=valid, values=values, forward_passes=len(new), prompt_tokens=prompt_tokens,
        generated_tokens=len(new), latency_ms=elapsed_ms, text=text, reason=reason,
    )


# --------------------------------------------------------------------------------------------
# 1. Unconstrained JSON generation


def json_generate(engine: Any, target: Any, payload: Any, *, max_new_tokens: int | None = None) -> MethodResult:
    """Greedy JSON generation from decisionflow's prompt (head + input + tail, object already opened).

    Stops on the token that closes the object. `max_new_tokens` defaults to twice the token length
    of a complete canonical answer; a run that reaches the cap unclosed is invalid.
    """
    compiled, _ = engine.compile(target)
    began = time.perf_counter()
    prompt_ids = list(compiled.head_tokens) + compiled.request_tokens(payload)
    cap = max_new_tokens if max_new_tokens is not None else 2 * canonical_object_tokens(compiled)
    opener = compiled.layout.opener
    new, closed, _ = _generate(engine, prompt_ids, opener=opener, max_new_tokens=cap)
    text = opener + engine.tokenizer.decode(new, skip_special_tokens=True)
    elapsed = (time.perf_counter() - began) * 1000
    return _finish("json_generate", compiled.rubric, text, new, closed, cap, len(prompt_ids), elapsed)


# --------------------------------------------------------------------------------------------
# 2. Grammar-constrained generation (XGrammar)

JSON_INDENT = 2
JSON_SEPARATORS = (",", ": ")


def json_schema(rubric: Rubric) -> dict[str, Any]:
    """The rubric as a JSON schema: enums of exact labels (or ids), booleans, enums of score levels.

    Every key is required and no other key is allowed; a conditional field may also be null, so the
    key order and layout stay fixed.
    """
    from .prompt import answer_ids

    properties: dict[str, Any] = {}
    for spec in rubric:
        if spec.kind is FieldKind.BOOLEAN:
            allowed: list[Any] = [True, False]
        elif spec.kind is FieldKind.SCORE:
            allowed = list(spec.values)
        elif rubric.answer_format is AnswerFormat.IDS:
            allowed = answer_ids(len(spec.values))
        else:
            allowed = list(spec.values)
        if spec.when is not None:
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
    from .prompt import render_input

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
        new, closed, _ = _generate(engine, prompt_ids, opener="", max_new_tokens=cap, logits_processor=LogitsProcessor(grammar))
        text = engine.tokenizer.decode(new, skip_special_tokens=True)
        elapsed = (time.perf_counter() - began) * 1000
        return _finish("grammar_constrained", compiled.rubric, text, new, closed, cap, len(prompt_ids), elapsed)


# --------------------------------------------------------------------------------------------
# 3 and 4. Row scoring without decisionflow's packed passes


def _row_depths(parents: tuple[int, ...]) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def _row_visibility(parents: tuple[int, ...]) -> Any:
    """[R, R] bool: row token i sees row token j when j is i or one of its ancestors."""
    import torch

    size = len(parents)
    visible = torch.zeros(size, size, dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            visible[i] = visible[parent]
        visible[i, i] = True
    return visible


def _readout(compiled_field: Any, row_logprobs: dict[int, Any]) -> Value:
    from .readout import read_field

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
        visible[size:, size:] = _row_visibility(cf.row_parents)
        mask = torch.zeros(visible.shape, dtype=backend.dtype).masked_fill_(~visible, torch.finfo(backend.dtype).min)
        positions = list(range(size)) + [size + d for d in _row_depths(cf.row_parents)]
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
            positions[b, :rows] = torch.tensor([size + d for d in _row_depths(cf.row_parents)])
            visible[b, :rows, size : size + rows] = _row_visibility(cf.row_parents)
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
# 5. pcd-rlcd, the original parallel-constrained-decoding engine


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
        ok, _, reason = _check_value(spec, values.get(spec.name), AnswerFormat.LABELS)
        if not ok:
            return False, None, reason
    return True, None, ""


def converted_model_folder(engine: Any) -> str | None:
    """The HF folder the bundled GGUF model was converted to (what pcd's MODEL_ID can point to)."""
    from .models import cache_root

    name = engine.loaded.name
    if not name.startswith("bundled:"):
        return name if os.path.isdir(name) else None
    stem = name.split(":", 1)[1].rsplit(".gguf", 1)[0]
    folders = sorted((cache_root() / "models").glob(f"{stem}-*"))
    folders = [f for f in folders if (f / "config.json").is_file()]
    return str(folders[0]) if folders else None
