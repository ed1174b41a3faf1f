"""Plain greedy JSON generation by the same model: the way decisionflow's answers are usually obtained.

`json_generate` writes the rubric's JSON object token by token from decisionflow's own prompt and
parses it strictly, without repair. It is the reference the benchmark times decisionflow against and
`decisionflow eval --baseline` scores; the shared pieces (the strict parser, the stop-on-close
criterion, the generation loop) serve the grammar-constrained baseline too.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ..compiler.prompt import answer_ids
from ..errors import Unavailable
from ..spec.rubric import AnswerFormat, FieldKind, FieldSpec, Rubric, Value

if TYPE_CHECKING:
    from ..runtime.engine import Engine


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


# --------------------------------------------------------------------------------------------
# Parsing generated JSON


def _ids_to_labels(spec: FieldSpec) -> dict[str, Value]:
    return dict(zip(answer_ids(len(spec.values)), spec.values))


def check_value(spec: FieldSpec, raw: Any, answer_format: AnswerFormat) -> tuple[bool, Value | None, str]:
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
    labels). Fields that can be left unanswered (`Rubric.optional_fields`: a `when` condition, or
    `options_by` options that some parent answer does not offer) may be absent or null. Nothing is repaired.
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
    optional = rubric.optional_fields
    for spec in rubric:
        if spec.name not in data or data[spec.name] is None:
            if spec.name not in optional:
                return False, None, f"missing key {spec.name!r}"
            values[spec.name] = None
            continue
        ok, value, reason = check_value(spec, data[spec.name], rubric.answer_format)
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


def generate_until_closed(
    engine: Engine,
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
    if not hasattr(model, "generate"):
        raise Unavailable(
            "generating text token by token needs the transformers model; load the engine with "
            "Engine.load(..., loader='transformers')"
        )
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


def finish_generation(method: str, rubric: Rubric, text: str, new: list[int], closed: bool, cap: int,
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
# Unconstrained JSON generation


def json_generate(engine: Engine, target: Any, payload: Any, *, max_new_tokens: int | None = None) -> MethodResult:
    """Greedy JSON generation from decisionflow's prompt (prefix + input + tail, object already opened).

    Stops on the token that closes the object. `max_new_tokens` defaults to twice the token length
    of a complete canonical answer; a run that reaches the cap unclosed is invalid.
    """
    compiled, _ = engine.compile(target)
    began = time.perf_counter()
    prompt_ids = list(compiled.prefix_tokens) + compiled.request_tokens(payload)
    cap = max_new_tokens if max_new_tokens is not None else 2 * canonical_object_tokens(compiled)
    opener = compiled.layout.opener
    new, closed, _ = generate_until_closed(engine, prompt_ids, opener=opener, max_new_tokens=cap)
    text = opener + engine.tokenizer.decode(new, skip_special_tokens=True)
    elapsed = (time.perf_counter() - began) * 1000
    return finish_generation("json_generate", compiled.rubric, text, new, closed, cap, len(prompt_ids), elapsed)
