"""The engine: declarations in, typed decisions out, without generating a token.

    engine = Engine.load()                      # bundled SmolLM2-135M-Instruct on the CPU
    result = engine.decide(Triage, "I was charged twice. Please refund the duplicate charge.")
    result.value                                # Triage(department='billing', ...)
    result.fields["department"].probabilities   # {'billing': 0.93, ...}

A rubric is compiled once per engine (prompt, layout probe, tries) and its head's KV cache is
computed once and reused by every later request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .backend import HeadCache, TransformersBackend
from .calibration import Calibration
from .compiler import CompiledRubric, ReadMode, TokenizerView, compile_rubric
from .declare import rubric_of, typed_model
from .executor import RequestState, check_fits, execute
from .models import LoadedModel, Status, load_model
from .plan import Plan, make_plan
from .result import Decision, Stats
from .rubric import Rubric

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EngineOptions:
    mode: ReadMode = ReadMode.BRANCH
    pin_first: bool | None = None
    """None: follow each rubric's own setting."""
    max_batch_tokens: int = 4096
    """decide_many packs requests into one pass until their new tokens reach this budget."""


@dataclass
class _Prepared:
    compiled: CompiledRubric
    plan: Plan
    head: HeadCache | None = None
    head_ms: float = 0.0


class Engine:
    def __init__(self, loaded: LoadedModel, *, options: EngineOptions | None = None):
        self.loaded = loaded
        self.backend = TransformersBackend(loaded.model)
        self.options = options or EngineOptions()
        self.view = TokenizerView(loaded.tokenizer)
        self._prepared: dict[tuple[str, str, bool | None], _Prepared] = {}

    @classmethod
    def load(
        cls,
        model: str | None = None,
        *,
        dtype: str = "float32",
        threads: int | None = None,
        status: Status | None = None,
        mode: ReadMode | str = ReadMode.BRANCH,
        pin_first: bool | None = None,
    ) -> Engine:
        """Load `model` (default: the bundled SmolLM2-135M-Instruct): a folder, a .gguf file or a hub id."""
        if threads:
            import torch

            torch.set_num_threads(threads)
        loaded = load_model(model, dtype=dtype, status=status or (lambda _: None))
        return cls(loaded, options=EngineOptions(mode=ReadMode(mode), pin_first=pin_first))

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    def compile(self, target: Any) -> tuple[CompiledRubric, Plan]:
        """The compiled rubric and plan for a decorated class or a Rubric (cached)."""
        prepared = self._prepare(rubric_of(target))
        return prepared.compiled, prepared.plan

    def _prepare(self, rubric: Rubric) -> _Prepared:
        key = (rubric.key, self.options.mode.value, self.options.pin_first)
        prepared = self._prepared.get(key)
        if prepared is None:
            compiled = compile_rubric(self.tokenizer, rubric, mode=self.options.mode, view=self.view)
            plan = make_plan(rubric, pin_first=self.options.pin_first)
            prepared = self._prepared[key] = _Prepared(compiled, plan)
        return prepared

    def decide(self, target: Any, payload: Any, *, calibration: Calibration | None = None) -> Decision:
        """Decide every field of `target` (a decorated class or a Rubric) for one input."""
        return self.decide_many(target, [payload], calibration=calibration)[0]

    def decide_many(
        self,
        target: Any,
        payloads: Iterable[Any],
        *,
        progress: Progress | None = None,
        calibration: Calibration | None = None,
    ) -> list[Decision]:
        """Decide many inputs of one rubric, several packed into each forward pass.

        `calibration` rescales each field's distribution and makes fields abstain below its thresholds.
        """
        rubric = rubric_of(target)
        model_cls = typed_model(target)
        prepared = self._prepare(rubric)
        # Tokenise and check every input before any pass, so a bad one fails fast and costs nothing.
        all_tokens = [prepared.compiled.request_tokens(p) for p in payloads]
        for index, tokens in enumerate(all_tokens):
            try:
                check_fits(prepared.compiled, tokens, self.backend.max_positions)
            except Exception as exc:
                if len(all_tokens) > 1:
                    raise type(exc)(f"input {index}: {exc}") from None
                raise

        head_hit = prepared.head is not None
        if prepared.head is None:
            began = time.perf_counter()
            prepared.head = self.backend.prefill_head(list(prepared.compiled.head_tokens))
            prepared.head_ms = (time.perf_counter() - began) * 1000

        decisions: list[Decision] = []
        for batch in self._batches(prepared.compiled, all_tokens):
            began = time.perf_counter()
            states = [RequestState(input_tokens=all_tokens[i]) for i in batch]
            pass_ms = execute(self.backend, prepared.compiled, prepared.plan, prepared.head, states, calibration)
            total_ms = (time.perf_counter() - began) * 1000
            for state in states:
                ordered = {name: state.results[name] for name in rubric.fields}
                answers = {name: state.answers[name] for name in rubric.fields}
                if any(f.abstained for f in ordered.values()):
                    # An abstained field is None even where the class requires a value: no guess is made up.
                    value = model_cls.model_construct(**answers)
                else:
                    value = model_cls.model_validate(answers)
                stats = Stats(
                    forward_passes=state.passes,
                    tokens_prefilled=state.tokens_fed,
                    input_tokens=len(state.input_tokens),
                    head_tokens=len(prepared.compiled.head_tokens),
                    head_cache_hit=head_hit,
                    batch_size=len(batch),
                    timings_ms={
                        "total": total_ms,
                        "passes": pass_ms,
                        **({} if head_hit else {"head_prefill": prepared.head_ms}),
                    },
                )
                decisions.append(Decision(rubric=rubric.name, value=value, fields=ordered, stats=stats))
                head_hit = True
            if progress:
                progress(len(decisions), len(all_tokens))
        return decisions

    def _batches(self, compiled: CompiledRubric, all_tokens: Sequence[list[int]]) -> list[list[int]]:
        rows = sum(f.row_length + max(map(len, f.answer_lines)) for f in compiled.fields.values())
        batches: list[list[int]] = []
        current: list[int] = []
        used = 0
        for index, tokens in enumerate(all_tokens):
            cost = len(tokens) + rows
            if current and used + cost > self.options.max_batch_tokens:
                batches.append(current)
                current, used = [], 0
            current.append(index)
            used += cost
        if current:
            batches.append(current)
        return batches
