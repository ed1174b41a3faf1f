"""The engine: declarations in, typed decisions out, without generating a token.

    engine = Engine.load()                      # bundled SmolLM2-135M-Instruct on the CPU
    result = engine.decide(Triage, "I was charged twice. Please refund the duplicate charge.")
    result.value                                # Triage(department='billing', ...)
    result.fields["department"].probabilities   # {'billing': 0.93, ...}

A rubric is compiled once per engine (prompt, layout probe, tries) and its head's KV cache is
computed once and reused by every later request. Prepared rubrics are kept in a bounded LRU cache
(by count and by the bytes their head caches hold); two threads asking for the same new rubric
prepare it once.

`Engine(loaded)` only reads the model it is given: it calls the model's modules in its own forward
pass and never changes the model's configuration, attention implementation or weights.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..compiler import Catalog, CompiledRubric, ReadMode, TokenizerView, compile_rubric
from ..errors import CalibrationError, DecisionflowError, InputError, ModelError, ResultError
from ..spec.declare import rubric_of, typed_model
from ..spec.plan import Plan, make_plan
from ..spec.rubric import Rubric
from .backend import HeadCache, TransformersBackend
from .calibration import Calibration
from .debias import CONTENT_FREE_INPUTS, Debias, Priors, mean_distribution
from .executor import RequestState, check_fits, execute
from .head_store import DEFAULT_MAX_BYTES, HeadStore, model_fingerprint
from .heads import Heads, prompt_fingerprint
from .loading import LoadedModel, Status, cache_root, load_model
from .ops import KERNEL_CHOICES
from .result import Decision, Stats

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class EngineOptions:
    mode: ReadMode = ReadMode.BRANCH
    catalog: Catalog = Catalog.AUTO
    """How much of each choice field's options the prompt lists, where the rubric does not say
    (`compiler.prompt.catalog_for`; measured in docs/engine.md)."""
    debias: Debias = Debias.CONTENT_FREE_HALF
    """The readout's bias correction (see `runtime.debias`); a rubric, a field or a call may override it.
    The default is the one that lost accuracy on no development set (docs/evaluation.md)."""
    kernels: str = "auto"
    """`auto`: the Triton kernels on CUDA when they import and support the model, else torch;
    `triton` (on the CPU only under TRITON_INTERPRET=1) or `torch` to choose."""
    pin_first: bool | None = None
    """None: follow each rubric's own setting."""
    max_batch_tokens: int = 4096
    """decide_many packs requests into one pass until their new tokens reach this budget."""
    max_prepared: int = 32
    """Prepared rubrics (compiled rows and head cache) kept; the least recently used go first."""
    max_head_bytes: int = 2 << 30
    """Bytes of head KV caches kept across prepared rubrics (the one in use is always kept)."""
    head_store: Path | None = None
    """A folder where head caches persist across processes (None: memory only)."""
    head_store_bytes: int = DEFAULT_MAX_BYTES
    """The persisted heads' byte budget; the least recently used files go first."""


@dataclass
class _Prepared:
    compiled: CompiledRubric
    plan: Plan
    head: HeadCache | None = None
    head_ms: float = 0.0
    head_source: str = ""
    """How the head was obtained the first time: `prefill` or `disk`."""
    compile_ms: float = 0.0
    content_free: dict[str, tuple[float, ...]] | None = None
    """Per field, its mean distribution over content-free inputs (the contextual-calibration prior)."""
    prior_ms: float = 0.0
    prior_source: str = ""
    """How the content-free prior was obtained: `decided` (the content-free inputs were read) or `disk`."""
    preparation_reported: bool = False
    """Whether a request has already reported what preparing the rubric cost (compile, head, prior)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    prior_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def claim_preparation_report(self) -> bool:
        """True for exactly one caller: the request that reports the preparation's cost."""
        with self.lock:
            if self.preparation_reported:
                return False
            self.preparation_reported = True
            return True

    @property
    def head_bytes(self) -> int:
        if self.head is None:
            return 0
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.head.kv)


class Engine:
    def __init__(self, loaded: LoadedModel, *, options: EngineOptions | None = None):
        self.loaded = loaded
        self.options = options or EngineOptions()
        self.backend = TransformersBackend(loaded.model, kernels=self.options.kernels)
        self.view = TokenizerView(loaded.tokenizer)
        self._prepared: OrderedDict[tuple[str, str, str, bool | None], _Prepared] = OrderedDict()
        self._prepared_lock = threading.Lock()
        self._store: HeadStore | None = None
        self._fingerprint: str | None = None

    @classmethod
    def load(
        cls,
        model: str | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        threads: int | None = None,
        status: Status | None = None,
        mode: ReadMode | str = ReadMode.BRANCH,
        pin_first: bool | None = None,
        persist_heads: bool = True,
        kernels: str = "auto",
        debias: Debias | str | None = None,
        loader: str = "auto",
        pack_weights: bool = True,
    ) -> Engine:
        """Load `model` (default: the bundled SmolLM2-135M-Instruct): a folder, a .gguf file or a hub id.

        `device`: `auto` (the first CUDA device when there is one, else the CPU), `cpu`, `cuda` or
        `cuda:N`. `dtype`: `auto` (bfloat16 on CUDA, float16 where bfloat16 is unsupported, float32 on
        the CPU), `float32`, `bfloat16` or `float16`.

        With `persist_heads` (the default) rubric head caches are kept on disk under the cache
        folder (`~/.cache/decisionflow/heads`, or `$DECISIONFLOW_CACHE/heads`), so a new process
        skips the head prefill of a rubric it has seen before.

        `debias`: the readout correction for fields whose rubric does not choose one (default
        `EngineOptions.debias`, see `runtime.debias`).

        `loader`: `auto` reads a checkpoint the engine's own decoder covers without building the
        transformers model (a faster start, the same weights); `transformers` always
        builds the transformers model, which token-by-token generation (`runtime.generation`) needs.
        `pack_weights`: see `loading.load_model` (off for a process that decides one text).
        """
        # Argument mistakes are named before the model loads, not after (a ModelError, like a bad device,
        # dtype or loader).
        mode = _choice("mode", mode, ReadMode)
        chosen_debias = None if debias is None else _choice("debias", debias, Debias)
        if kernels not in KERNEL_CHOICES:
            raise ModelError(f"Engine.load: unknown kernels {kernels!r}; use {', '.join(map(repr, KERNEL_CHOICES))}")
        if threads:
            import torch

            torch.set_num_threads(threads)
        loaded = load_model(model, dtype=dtype, device=device, status=status or (lambda _: None), loader=loader,
                            pack_weights=pack_weights)
        store = cache_root() / "heads" if persist_heads else None
        options = EngineOptions(mode=mode, pin_first=pin_first, head_store=store, kernels=kernels)
        if chosen_debias is not None:
            options = replace(options, debias=chosen_debias)
        return cls(loaded, options=options)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def head_store(self) -> HeadStore | None:
        """The disk store of head caches (None when heads are kept in memory only)."""
        if self._store is None and self.options.head_store is not None:
            self._store = HeadStore(
                self.options.head_store, fingerprint=self.model_fingerprint,
                dtype=self.backend.dtype, max_bytes=self.options.head_store_bytes,
            )
        return self._store

    def compile(self, target: Any) -> tuple[CompiledRubric, Plan]:
        """The compiled rubric and plan for a decorated class or a Rubric (cached)."""
        prepared = self._prepare(rubric_of(target))
        return prepared.compiled, prepared.plan

    def decide(
        self, target: Any, payload: Any, *, calibration: Calibration | None = None, debias: Debias | str | None = None,
        heads: Heads | None = None,
    ) -> Decision:
        """Decide every field of `target` (a decorated class or a Rubric) for one input."""
        return self.decide_many(target, [payload], calibration=calibration, debias=debias, heads=heads)[0]

    def decide_many(
        self,
        target: Any,
        payloads: Iterable[Any],
        *,
        progress: Progress | None = None,
        calibration: Calibration | None = None,
        debias: Debias | str | None = None,
        heads: Heads | None = None,
    ) -> list[Decision]:
        """Decide many inputs of one rubric, several packed into each forward pass.

        Every input is checked before any pass runs: the first bad one raises its error, with
        `error.input_index` (and the message) naming it. `calibration` rescales each field's
        distribution and makes fields abstain below its thresholds. `debias` overrides the engine's
        readout correction for this call (see `runtime.debias`). `heads` (from `fit`, or
        `Heads.load`) answer the fields they were fitted for, in the same passes.
        """
        payloads = _inputs(payloads, "decide_many")
        outcomes = self._decide(target, payloads, progress=progress, calibration=calibration, debias=debias,
                                heads=heads, fail_fast=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        return outcomes  # type: ignore[return-value]

    def decide_each(
        self,
        target: Any,
        payloads: Iterable[Any],
        *,
        progress: Progress | None = None,
        calibration: Calibration | None = None,
        debias: Debias | str | None = None,
        heads: Heads | None = None,
    ) -> list[Decision | DecisionflowError]:
        """Like `decide_many`, but a bad input does not stop the others: per input, its decision or its error.

        An input that cannot be decided (empty, too long, refused by the class's own validators)
        comes back as the `DecisionflowError` saying why, with `input_index` set; the other inputs
        are still packed together. Errors that concern the whole rubric (it cannot be compiled, a
        calibration that does not fit it) are raised.
        """
        return self._decide(
            target, _inputs(payloads, "decide_each"), progress=progress, calibration=calibration, debias=debias,
            heads=heads, fail_fast=False,
        )

    def fit(self, target: Any, rows: Iterable[Any], **options: Any) -> Any:
        """Fit a head per labelled field of `target` on `rows` and choose, per field, on cross-validated
        evidence, between it and the zero-shot readout. Returns a `head_fit.FitResult`: its `.heads`
        (save them with `.heads.save(path)`, apply them with `decide(..., heads=)`) and its report.

        `rows`: `(text, {field: label})` pairs, or mappings with a `text` key and a key per labelled
        field (a row may label only some fields). `options`: see `head_fit.fit_heads`.
        """
        from .head_fit import fit_heads

        return fit_heads(self, target, rows, **options)

    def check_heads(self, heads: Heads, target: Any) -> None:
        """Refuse heads fitted for another model, rubric, prompt or option set (a `HeadsError`)."""
        rubric = rubric_of(target)
        prepared = self._prepare(rubric)
        heads.check(rubric, model=self.model_fingerprint, prompt=prompt_fingerprint(prepared.compiled.head_tokens),
                    hidden_size=int(self.backend.config.hidden_size), model_name=getattr(self.loaded, "name", "") or "",
                    dtype=str(self.backend.dtype).removeprefix("torch."))

    @property
    def model_fingerprint(self) -> str:
        """The loaded model's content fingerprint (what head caches and fitted heads are keyed by)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.loaded.model)
        return self._fingerprint

    # -- phases -------------------------------------------------------------------------------

    def _decide(
        self, target: Any, payloads: list[Any], *, progress: Progress | None,
        calibration: Calibration | None, debias: Debias | str | None, fail_fast: bool, internal: bool = False,
        heads: Heads | None = None, capture: Sequence[int] = (), forced: Sequence[dict[str, str]] | None = None,
        captured: list[Any] | None = None,
    ) -> list[Decision | DecisionflowError]:
        """`internal`: the engine's own reading (of content-free inputs), which never reports the
        rubric's preparation: the first request of the caller's does. `capture`, `forced` and
        `captured` serve fitting: the hidden layers to keep, per input the answers to write instead of
        the model's, and a list that receives per input what each field's head would read."""
        rubric = rubric_of(target)
        if calibration is not None:
            calibration.check(rubric)
        if heads is not None and not heads.fitted_fields:
            heads = None
        if heads is not None:
            # Checked once per (model, prepared rubric): the heads object remembers what it was checked against.
            checked = (self.model_fingerprint, self._prepared_key(rubric))
            if checked not in heads.checked_for:
                self.check_heads(heads, rubric)
                heads.checked_for.add(checked)
        model_cls = typed_model(target)
        prepared = self._prepare(rubric)
        priors = self._priors(prepared, rubric, debias, calibration, heads)
        outcomes: list[Decision | DecisionflowError | None] = [None] * len(payloads)
        tokens = self._admit(prepared.compiled, payloads, outcomes, fail_fast=fail_fast)
        admitted = [i for i, t in enumerate(tokens) if t is not None]
        if admitted:
            self._ensure_head(prepared)
        # "Hit": this request did not pay for preparing the rubric (compile, head, prior), which the
        # caller's first request reports, whoever made the head first.
        head_hit = internal or not admitted or not prepared.claim_preparation_report()
        done = len(payloads) - len(admitted)
        for batch in self._batches(prepared.compiled, [tokens[i] for i in admitted]):  # type: ignore[misc]
            indexes = [admitted[b] for b in batch]
            began = time.perf_counter()
            states = [RequestState(input_tokens=tokens[i], forced=dict(forced[i]) if forced else {})  # type: ignore[arg-type]
                      for i in indexes]
            pass_ms = execute(self.backend, prepared.compiled, prepared.plan, prepared.head, states, calibration,  # type: ignore[arg-type]
                              priors, heads, capture)
            if captured is not None:
                for index, state in zip(indexes, states):
                    captured[index] = state.captured
            total_ms = (time.perf_counter() - began) * 1000
            for index, state in zip(indexes, states):
                stats = Stats(
                    forward_passes=state.passes,
                    tokens_prefilled=state.tokens_fed,
                    input_tokens=len(state.input_tokens),
                    head_tokens=len(prepared.compiled.head_tokens),
                    head_cache_hit=head_hit,
                    batch_size=len(indexes),
                    timings_ms={
                        "total": total_ms,
                        "passes": pass_ms,
                        **({} if head_hit else {
                            "compile": prepared.compile_ms,
                            f"head_{'load' if prepared.head_source == 'disk' else 'prefill'}": prepared.head_ms,
                            **({f"prior_{'load' if prepared.prior_source == 'disk' else 'read'}": prepared.prior_ms}
                               if prepared.prior_source else {}),
                        }),
                    },
                    head_source="memory" if head_hit else prepared.head_source,
                    device=str(self.backend.device),
                    dtype=str(self.backend.dtype).removeprefix("torch."),
                    kernels=self.backend.kernels,
                )
                outcomes[index] = self._typed_decision(
                    rubric, model_cls, state, stats, index if len(payloads) > 1 else None
                )
                head_hit = True
            done += len(indexes)
            if progress:
                progress(done, len(payloads))
        if fail_fast:
            failed = next((o for o in outcomes if isinstance(o, DecisionflowError)), None)
            if failed is not None:
                raise failed
        return outcomes  # type: ignore[return-value]

    def _admit(
        self, compiled: CompiledRubric, payloads: list[Any], outcomes: list[Any], *, fail_fast: bool
    ) -> list[list[int] | None]:
        """Tokenise and check every input before any pass: a bad one costs nothing and is named."""
        tokens: list[list[int] | None] = []
        for index, payload in enumerate(payloads):
            try:
                request = compiled.request_tokens(payload)
                check_fits(compiled, request, self.backend.max_positions)
            except DecisionflowError as error:
                if len(payloads) > 1:
                    error.input_index = index
                if fail_fast:
                    raise
                outcomes[index] = error
                tokens.append(None)
                continue
            except Exception as error:
                if len(payloads) > 1:
                    error.add_note(f"while reading input {index}")
                raise
            tokens.append(request)
        return tokens

    @staticmethod
    def _typed_decision(
        rubric: Rubric, model_cls: Any, state: RequestState, stats: Stats, index: int | None
    ) -> Decision | DecisionflowError:
        ordered = {name: state.results[name] for name in rubric.fields}
        answers = {name: state.answers[name] for name in rubric.fields}
        try:
            if any(f.abstained for f in ordered.values()):
                # An abstained field is None even where the class requires a value: no guess is made up.
                value = model_cls.model_construct(**answers)
            else:
                value = model_cls.model_validate(answers)
        except Exception as error:  # noqa: BLE001 - a user's validator may raise anything
            refused = ResultError(
                f"{model_cls.__name__} refused the decided answers {answers}: {type(error).__name__}: "
                + str(error).replace("\n", "; ")
            )
            refused.input_index = index
            return refused
        return Decision(rubric=rubric.name, value=value, fields=ordered, stats=stats)

    def _priors(
        self, prepared: _Prepared, rubric: Rubric, call: Debias | str | None, calibration: Calibration | None,
        heads: Heads | None = None,
    ) -> Priors | None:
        """The prior each field is divided by. Per field the method is the one its fitted head was fitted
        under (its features include the corrected readout), else the call's, else the one the
        calibration was fitted under, else the field's, else the rubric's, else the engine's: content-free
        priors are estimated once per rubric; domain priors come from the calibration file (refused when
        it has none for that field)."""
        fitted = calibration.corrections() if calibration is not None else {}
        head_corrections = {name: Debias(method) for name, method in heads.corrections().items()} if heads else {}
        if call is not None and not isinstance(call, Debias):
            try:
                call = Debias(call)
            except ValueError:
                raise CalibrationError(
                    f"unknown readout correction {call!r} (debias: {', '.join(d.value for d in Debias)})"
                ) from None
        methods = {
            name: Debias(head_corrections.get(name) or call or fitted.get(name) or spec.debias or rubric.debias
                         or self.options.debias)
            for name, spec in rubric.fields.items()
        }
        if all(method is Debias.NONE for method in methods.values()):
            return None
        wanted = any(method.uses_content_free_prior for method in methods.values())
        content_free = self._content_free_prior(prepared, rubric) if wanted else {}
        domain = calibration.priors(rubric) if calibration is not None else {}
        fields: dict[str, tuple[Debias, tuple[float, ...]]] = {}
        for name, method in methods.items():
            if method.uses_content_free_prior and name in content_free:
                fields[name] = (method, content_free[name])
            elif method is Debias.DOMAIN:
                if name not in domain:
                    raise CalibrationError(
                        f"field {name!r} asks for a domain prior, but no calibration with one for it was given "
                        "(fit one with `decisionflow calibrate --unlabelled`)"
                    )
                fields[name] = (method, domain[name])
        return Priors(fields) if fields else None

    def _content_free_prior(self, prepared: _Prepared, rubric: Rubric) -> dict[str, tuple[float, ...]]:
        """Each field's mean distribution over the content-free inputs, computed once per rubric."""
        if prepared.content_free is not None:
            return prepared.content_free
        with prepared.prior_lock:
            if prepared.content_free is None:
                self._ensure_head(prepared)  # first, so that the prior's time is its own reading only
                began = time.perf_counter()
                head_tokens, identity = prepared.compiled.head_tokens, self._prior_identity(rubric)
                store = self.head_store
                stored = store.load_prior(head_tokens, identity) if store is not None else None
                if stored is not None:
                    prepared.content_free, prepared.prior_source = stored, "disk"
                    prepared.prior_ms = (time.perf_counter() - began) * 1000
                    return stored
                outcomes = self._decide(rubric, list(CONTENT_FREE_INPUTS), progress=None, calibration=None,
                                        debias=Debias.NONE, fail_fast=False, internal=True)
                # (`debias=none` for the call: the prior is the model's own, uncorrected distribution.)
                decided = [o for o in outcomes if isinstance(o, Decision)]
                priors = {}
                for name, spec in rubric.fields.items():
                    seen = [tuple(d.fields[name].probabilities.get(label, 0.0) for label in spec.labels)
                            for d in decided if d.fields[name].asked and spec.derive is None]
                    prior = mean_distribution(seen)
                    if prior is not None:
                        priors[name] = prior
                prepared.content_free, prepared.prior_source = priors, "decided"
                prepared.prior_ms = (time.perf_counter() - began) * 1000
                if store is not None:
                    store.save_prior(head_tokens, identity, priors)
        return prepared.content_free

    def _prior_identity(self, rubric: Rubric) -> dict[str, Any]:
        """What a rubric's content-free priors depend on besides its head, the model and the dtype."""
        return {"inputs": list(CONTENT_FREE_INPUTS), "prepared": list(self._prepared_key(rubric))}

    def _prepared_key(self, rubric: Rubric) -> tuple[str, str, str, bool | None]:
        """Everything that shapes a rubric's compiled prompt, rows and plan in this engine."""
        return (rubric.key, self.options.mode.value, self.options.catalog.value, self.options.pin_first)

    def _prepare(self, rubric: Rubric) -> _Prepared:
        key = self._prepared_key(rubric)
        with self._prepared_lock:
            prepared = self._prepared.get(key)
            if prepared is not None:
                self._prepared.move_to_end(key)
                return prepared
        began = time.perf_counter()
        compiled = compile_rubric(self.tokenizer, rubric, mode=self.options.mode, view=self.view, catalog=self.options.catalog)
        plan = make_plan(rubric, pin_first=self.options.pin_first)
        compile_ms = (time.perf_counter() - began) * 1000
        with self._prepared_lock:
            # Another thread may have prepared the same rubric meanwhile: keep the first one.
            prepared = self._prepared.setdefault(key, _Prepared(compiled, plan, compile_ms=compile_ms))
            self._prepared.move_to_end(key)
            self._evict(keep=key)
        return prepared

    def _ensure_head(self, prepared: _Prepared) -> None:
        """Get the rubric's head cache once (other threads wait for it): from the disk store when it has
        it, else by a prefill that is then stored."""
        if prepared.head is not None:
            return
        with prepared.lock:
            if prepared.head is not None:
                return
            began = time.perf_counter()
            tokens = prepared.compiled.head_tokens
            store = self.head_store
            head = store.load(tokens, layers=len(self.backend.parts.layers), device=self.backend.device) if store else None
            prepared.head_source = "disk" if head is not None else "prefill"
            if head is None:
                head = self.backend.prefill_head(list(tokens))
                if store is not None:
                    store.save(tokens, head)
            prepared.head = head
            prepared.head_ms = (time.perf_counter() - began) * 1000
        with self._prepared_lock:
            self._evict(keep=next((k for k, p in self._prepared.items() if p is prepared), None))

    def _evict(self, *, keep: Any) -> None:
        """Drop least recently used rubrics beyond the count and head-byte budgets (caller holds the lock)."""
        def over() -> bool:
            heads = sum(p.head_bytes for p in self._prepared.values())
            return len(self._prepared) > self.options.max_prepared or heads > self.options.max_head_bytes

        for key in list(self._prepared):
            if not over():
                break
            if key != keep:
                del self._prepared[key]

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


def _inputs(payloads: Iterable[Any], method: str) -> list[Any]:
    """The inputs of a many-input call as a list; one input passed where the list belongs is refused
    (iterating a string would decide each of its characters, and a mapping each of its keys)."""
    if isinstance(payloads, (str, bytes, dict)):
        raise InputError(
            f"{method} takes a list of inputs, got one {type(payloads).__name__}; "
            f"pass [input], or call decide() for a single input"
        )
    return list(payloads)


def _choice(argument: str, value: Any, kind: type[Enum]) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(repr(member.value) for member in kind)  # type: ignore[attr-defined]
        raise ModelError(f"Engine.load: unknown {argument} {value!r}; use {allowed}") from None
