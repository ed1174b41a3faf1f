"""The engine: declarations in, typed decisions out, without generating a token.

    engine = Engine.load()                      # bundled SmolLM2-135M-Instruct on the CPU
    result = engine.decide(Triage, "I was charged twice. Please refund the duplicate charge.")
    result.value                                # Triage(department='billing', ...)
    result.fields["department"].probabilities   # {'billing': 0.93, ...}

A rubric is compiled once per engine (prompt, layout probe, tries) and its prefix's KV cache is
computed once and reused by every later request: `engine.prepared` (`runtime.prepared`) keeps them in
a bounded LRU cache, with the disk store of prefixes and the content-free priors behind it.

`Engine(loaded)` only reads the model it is given: it calls the model's modules in its own forward
pass and never changes the model's configuration, attention implementation or weights.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import InitVar, dataclass, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..compiler import DEFAULT_CATALOG, Catalog, CompiledRubric, ReadMode, TokenizerView
from ..errors import DecisionflowError, InputError, ModelError, ResultError
from ..spec.declare import rubric_of, typed_model
from ..spec.kinds import Reading
from ..spec.plan import Plan
from ..spec.rubric import Rubric
from .adapter import Adapter
from .executor import FreeReading, RequestState, check_fits, execute
from .heads.fitted import Heads, prompt_fingerprint
from .model.loading import LoadedModel, Status, cache_root, load_model
from .passes.backend import DECODER_PATH, DecoderBackend
from .passes.ops import KERNEL_CHOICES
from .passes.protocol import Backend
from .prefix_store import DEFAULT_MAX_BYTES, FOLDER, PrefixStore, model_fingerprint, weights_fingerprint
from .prepared import Checkpoint, PreparedRubrics
from .readout.calibration import Calibration
from .readout.debias import CONTENT_FREE_BY_READING, Debias, Priors
from .result import Decision, Stats

Progress = Callable[[int, int], None]
_PREFIX_TIMING = {"prefill": "prefix_prefill", "disk": "prefix_load", "memory": "prefix_shared", "": "prefix_prefill"}
"""The timing a request that prepared its rubric reports for the prefix, by where the prefix came from."""


@dataclass(frozen=True)
class EngineOptions:
    mode: ReadMode = ReadMode.BRANCH
    catalog: Catalog = DEFAULT_CATALOG
    """How much of each choice field's options the prompt lists, where the rubric does not say
    (`compiler.prompt.catalog_for`; measured in docs/engine.md)."""
    debias: Debias | None = None
    """The readout's bias correction (see `runtime.readout.debias`); a rubric, a field or a call may override it.
    None: the default of each rubric's reading (`debias.DEFAULT_BY_READING`: `content_free_half` shared,
    `content_free` for independent questions), the one that lost accuracy on no development set."""
    kernels: str = "auto"
    """`auto`: the Triton kernels on CUDA when they import and support the model, else torch;
    `triton` (on the CPU only under TRITON_INTERPRET=1) or `torch` to choose."""
    pin_first: bool | None = None
    """None: follow each rubric's own setting."""
    max_batch_tokens: int = 4096
    """decide_many packs requests into one pass until their new tokens reach this budget."""
    max_prepared: int = 32
    """Prepared rubrics (compiled rows and prefix cache) kept; the least recently used go first."""
    max_prefix_bytes: int = 2 << 30
    """Bytes of prefix KV caches kept across prepared rubrics (the one in use is always kept)."""
    prefix_store: Path | None = None
    """A folder where prefix caches persist across processes (None: memory only)."""
    prefix_store_bytes: int = DEFAULT_MAX_BYTES
    """The persisted prefixes' byte budget; the least recently used files go first."""
    model_forward: bool = False
    """Run every pass through the model's own forward (`model_forward`), even for a family the engine's
    decoder path reproduces (what `--loader generic` asks for; the generic path is always taken for the others)."""
    head_store: InitVar[Path | None] = None
    """Deprecated: the earlier name of `prefix_store` (still accepted and read)."""
    head_store_bytes: InitVar[int | None] = None
    """Deprecated: the earlier name of `prefix_store_bytes`."""
    max_head_bytes: InitVar[int | None] = None
    """Deprecated: the earlier name of `max_prefix_bytes`."""

    def __post_init__(self, head_store: Path | None, head_store_bytes: int | None, max_head_bytes: int | None) -> None:
        defaults = {f.name: f.default for f in fields(self)}
        for old, new, value in (("head_store", "prefix_store", head_store), ("head_store_bytes", "prefix_store_bytes", head_store_bytes),
                                ("max_head_bytes", "max_prefix_bytes", max_head_bytes)):
            # An old name given where the new one is left at its default (`replace` passes both: the new one wins).
            if value is not None and getattr(self, new) == defaults[new] != value:
                warnings.warn(f"EngineOptions({old}=...) is deprecated: use {new}", DeprecationWarning, stacklevel=3)
                object.__setattr__(self, new, value)
            object.__setattr__(self, old, getattr(self, new))  # the old name reads the new field


class Engine:
    def __init__(self, loaded: LoadedModel, *, options: EngineOptions | None = None, backend: Backend | None = None,
                 adapter: Adapter | str | Path | None = None):
        """`backend`: the passes' runner, where not the one `backend_for` picks (`check-model` gives the
        plain-forward reference). `adapter`: a LoRA adapter from `decisionflow tune` (or its file), merged into
        copies of the projections it adapts (`runtime.adapter`); `loaded` itself is not changed."""
        self.base_loaded = loaded
        """The model as loaded, without the adapter (what `with_adapter` merges another adapter into)."""
        self.adapter: Adapter | None = Adapter.load(adapter) if isinstance(adapter, (str, Path)) else adapter
        if self.adapter is not None:
            loaded = replace(loaded, model=self.adapter.merged(loaded.model))
        self.loaded = loaded
        self.options = options or EngineOptions()
        self.backend: Backend = backend if backend is not None else backend_for(loaded.model, self.options)
        self.view = TokenizerView(loaded.tokenizer)
        self._fingerprint: str | None = None
        self._weights_fingerprint: str | None = None
        options = self.options
        self.prepared = PreparedRubrics(
            self.backend, self.view, mode=options.mode, catalog=options.catalog, pin_first=options.pin_first,
            max_prepared=options.max_prepared, max_prefix_bytes=options.max_prefix_bytes, default_debias=options.debias,
            store_folder=options.prefix_store, store_bytes=options.prefix_store_bytes,
            fingerprint=lambda: self.prefix_store_fingerprint, read_content_free=self._read_content_free,
        )
        """The prepared-rubric cache (compiled rows, plans, prefix caches, content-free priors)."""

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
        persist_prefixes: bool = True,
        kernels: str = "auto",
        debias: Debias | str | None = None,
        loader: str = "auto",
        pack_weights: bool = True,
        persist_heads: bool | None = None,
        adapter: Adapter | str | Path | None = None,
    ) -> Engine:
        """Load `model` (default: the bundled SmolLM2-135M-Instruct): a folder, a .gguf file or a hub id.

        `device`: `auto` (the first CUDA device when there is one, else the CPU), `cpu`, `cuda` or
        `cuda:N`. `dtype`: `auto` (`$DECISIONFLOW_DTYPE` when set; else bfloat16 on CUDA, float16
        where bfloat16 is unsupported; on the CPU bfloat16 where it multiplies bfloat16 in hardware
        (AVX512-BF16, AMX), else float32), `float32`, `bfloat16` or `float16`.
        `result.stats.dtype` says which was taken.

        With `persist_prefixes` (the default) rubric prefix caches are kept on disk under the cache
        folder (`~/.cache/decisionflow/prefixes`, or `$DECISIONFLOW_CACHE/prefixes`), so a new process
        skips the prefix prefill of a rubric it has seen before (files a store kept under the earlier
        `heads` folder are still read). `persist_heads`: deprecated, the earlier name of `persist_prefixes`.

        `debias`: the readout correction for fields whose rubric does not choose one (default
        `EngineOptions.debias`, see `runtime.readout.debias`).

        `loader`: `auto` reads a checkpoint the engine's own decoder covers without building the
        transformers model (a faster start, the same weights); `transformers` always
        builds the transformers model, which token-by-token generation (`baselines.generation`) needs;
        `generic` builds it and runs every pass through its own forward (`model_forward`), the path every
        family the engine's decoder does not reproduce takes anyway. `result.stats.path` says which ran.
        `pack_weights`: see `loading.load_model` (off for a process that decides one text).
        `adapter`: a LoRA adapter from `decisionflow tune` (or its file), merged into the weights it adapts
        (`runtime.adapter`); refused, in one line, where the model is not the one it was tuned on.
        """
        # Argument mistakes are named before the model loads, not after (a ModelError, like a bad device,
        # dtype or loader).
        mode = _choice("mode", mode, ReadMode)
        chosen_debias = None if debias is None else _choice("debias", debias, Debias)
        if kernels not in KERNEL_CHOICES:
            raise ModelError(f"Engine.load: unknown kernels {kernels!r}; use {', '.join(map(repr, KERNEL_CHOICES))}")
        if isinstance(adapter, (str, Path)):
            adapter = Adapter.load(adapter)  # a missing or damaged file is named before the model loads
        if threads:
            import torch

            torch.set_num_threads(threads)
        loaded = load_model(model, dtype=dtype, device=device, status=status or (lambda _: None), loader=loader,
                            pack_weights=pack_weights)
        if persist_heads is not None:
            warnings.warn("Engine.load(persist_heads=...) is deprecated: use persist_prefixes", DeprecationWarning, stacklevel=2)
            persist_prefixes = persist_heads
        store = cache_root() / FOLDER if persist_prefixes else None
        options = EngineOptions(mode=mode, pin_first=pin_first, prefix_store=store, kernels=kernels,
                                model_forward=loader == "generic")
        if chosen_debias is not None:
            options = replace(options, debias=chosen_debias)
        return cls(loaded, options=options, adapter=adapter)

    def with_adapter(self, adapter: Adapter | str | Path | None) -> Engine:
        """An engine over the same loaded model (its weights shared, not copied) with `adapter` merged in (None:
        none), with this engine's options and prepared rubrics of its own."""
        return Engine(self.base_loaded, options=self.options, adapter=adapter)

    @property
    def tokenizer(self) -> Any:
        return self.loaded.tokenizer

    @property
    def prefix_store(self) -> PrefixStore | None:
        """The disk store of prefix caches (None when prefixes are kept in memory only)."""
        return self.prepared.store

    @property
    def head_store(self) -> PrefixStore | None:
        """Deprecated: the earlier name of `prefix_store`."""
        return self.prefix_store

    def compile(self, target: Any) -> tuple[CompiledRubric, Plan]:
        """The compiled rubric and plan for a decorated class or a Rubric (cached)."""
        prepared = self.prepared.get(rubric_of(target))
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
        readout correction for this call (see `runtime.readout.debias`). `heads` (from `fit`, or
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
        checkpoint: Checkpoint | None = None,
    ) -> list[Decision | DecisionflowError]:
        """Like `decide_many`, but a bad input does not stop the others: per input, its decision or its error.

        An input that cannot be decided (empty, too long, refused by the class's own validators)
        comes back as the `DecisionflowError` saying why, with `input_index` set; the other inputs
        are still packed together. Errors that concern the whole rubric (it cannot be compiled, a
        calibration that does not fit it) are raised.

        `checkpoint` (a server's): asked with the phase about to begin, before the rubric's prefix prefill
        (`prefix`), before each pass of its content-free reading (`prior`) and before each pass of the inputs
        (`pass`); what it raises ends the call there (see `runtime.prepared`).
        """
        return self._decide(
            target, _inputs(payloads, "decide_each"), progress=progress, calibration=calibration, debias=debias,
            heads=heads, fail_fast=False, checkpoint=checkpoint,
        )

    def read_features(
        self, target: Any, payloads: Sequence[Any], *, layers: Sequence[int], write: Sequence[Mapping[str, str]] | None = None,
        progress: Progress | None = None, mean_layers: Sequence[int] = (),
    ) -> tuple[list[Decision | DecisionflowError], list[Any]]:
        """Decide `payloads` zero-shot (the rubric's own readout correction, no heads, no calibration) and
        keep, per input and per field read, what a fitted head reads (`executor.Captured`: the hidden states
        of `layers` at the field's answer position, counted from the top, the zero-shot distribution, and
        with `mean_layers` the hidden states of those layers averaged over the input's positions).

        `write`: per input, answers to write into the prompt instead of the model's (`{field: label}`), so a
        dependent field is read under the right parent answer, as fitting heads needs. Returns per input its
        decision or the error it raised, and its reads (None where it could not be read)."""
        captured: list[Any] = [None] * len(payloads)
        outcomes = self._decide(target, list(payloads), progress=progress, calibration=None, debias=None, fail_fast=False,
                                capture=tuple(layers), capture_means=tuple(mean_layers), forced=write, captured=captured)
        return outcomes, captured

    def check_heads(self, heads: Heads, target: Any) -> None:
        """Refuse heads fitted for another model, rubric, prompt or option set (a `HeadsError`). Checked
        once per (model, prepared rubric): the heads object remembers what it passed against."""
        rubric = rubric_of(target)
        checked = (self.model_fingerprint, self.prepared.key(rubric))
        if checked in heads.checked_for:
            return
        prepared = self.prepared.get(rubric)
        heads.check(rubric, model=self.model_fingerprint, prompt=prompt_fingerprint(prepared.compiled.prefix_tokens),
                    hidden_size=int(self.backend.config.hidden_size), model_name=getattr(self.loaded, "name", "") or "",
                    dtype=str(self.backend.dtype).removeprefix("torch."), weights=self.weights_fingerprint)
        heads.checked_for.add(checked)

    @property
    def prefix_store_fingerprint(self) -> str:
        """What stored prefix caches are keyed by: the model, and the path when it is not the decoder path (a
        prefix's keys and values are those of the modules that computed them)."""
        if self.backend.path == DECODER_PATH:
            return self.model_fingerprint
        return f"{self.model_fingerprint}-{self.backend.path}"

    @property
    def model_fingerprint(self) -> str:
        """The loaded model's content fingerprint (what prefix caches and fitted heads are keyed by)."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.loaded.model) + self._adapted
        return self._fingerprint

    @property
    def weights_fingerprint(self) -> str:
        """The loaded weights' fingerprint whatever number format they are in: equal for the same checkpoint
        loaded in float32 and in bfloat16 (heads fitted in one apply in the other)."""
        if self._weights_fingerprint is None:
            self._weights_fingerprint = weights_fingerprint(self.loaded.model) + self._adapted
        return self._weights_fingerprint

    @property
    def _adapted(self) -> str:
        """What an adapter adds to the model's fingerprints (the fingerprints sample no projection it changes)."""
        return f"+adapter-{self.adapter.fingerprint}" if self.adapter is not None else ""

    # -- phases -------------------------------------------------------------------------------

    def _decide(
        self, target: Any, payloads: list[Any], *, progress: Progress | None,
        calibration: Calibration | None, debias: Debias | str | None, fail_fast: bool, internal: bool = False,
        heads: Heads | None = None, capture: Sequence[int] = (), forced: Sequence[dict[str, str]] | None = None,
        captured: list[Any] | None = None, capture_means: Sequence[int] = (), checkpoint: Checkpoint | None = None,
    ) -> list[Decision | DecisionflowError]:
        """`internal`: the engine's own reading (of content-free inputs), which never reports the
        rubric's preparation: the first request of the caller's does. `capture`, `capture_means`, `forced`
        and `captured` serve fitting: the hidden layers to keep, those to average over each input, per
        input the answers to write instead of the model's, and a list that receives per input what each
        field's head would read."""
        rubric = rubric_of(target)
        if calibration is not None:
            calibration.check(rubric)
        if heads is not None:
            if not isinstance(heads, Heads):
                raise TypeError(f"heads= takes the fitted heads (`fit_heads(engine, ...).heads`, or `Heads.load(path)`), "
                                f"got {type(heads).__name__}")
            # Checked even with no field fitted: heads saved for another rubric are refused, not ignored.
            self.check_heads(heads, rubric)
            if not heads.fitted_fields:
                heads = None
        if calibration is not None:
            calibration.check_readouts(heads.fitted_fields if heads is not None else ())
        model_cls = typed_model(target)
        prepared = self.prepared.get(rubric)
        # Independent questions read nothing but the input: a prior they lack is read in their own first pass.
        pending: dict[str, Debias] | None = {} if rubric.reading is Reading.INDEPENDENT and not internal else None
        priors = self.prepared.priors(prepared, rubric, debias, calibration, heads, checkpoint=checkpoint,
                                      pending=pending)
        outcomes: list[Decision | DecisionflowError | None] = [None] * len(payloads)
        tokens = self._admit(prepared.compiled, payloads, outcomes, fail_fast=fail_fast)
        admitted = [i for i, t in enumerate(tokens) if t is not None]
        if admitted:
            self.prepared.ensure_prefix(prepared, checkpoint=checkpoint)
        # "Hit": this request did not pay for preparing the rubric (compile, prefix, prior), which the
        # caller's first request reports, whoever made the prefix first.
        prefix_hit = internal or not admitted or not prepared.claim_preparation_report()
        done = len(payloads) - len(admitted)
        for batch in self._batches(prepared.compiled, [tokens[i] for i in admitted]):  # type: ignore[misc]
            indexes = [admitted[b] for b in batch]
            began = time.perf_counter()
            states = [RequestState(input_tokens=tokens[i], forced=dict(forced[i]) if forced else {},  # type: ignore[arg-type]
                                   words=heads.words(payloads[i]) if heads is not None else None)
                      for i in indexes]
            free = None
            if pending:
                inputs = CONTENT_FREE_BY_READING[rubric.reading]
                free = FreeReading(len(inputs), pending)
                states = [RequestState(input_tokens=prepared.compiled.request_tokens(text)) for text in inputs] + states
            pass_ms = execute(self.backend, prepared.compiled, prepared.plan, prepared.prefix, states, calibration,  # type: ignore[arg-type]
                              priors, heads, capture, capture_means, checkpoint=checkpoint, free=free)
            if free is not None:
                states = states[free.requests:]
                self.prepared.keep_content_free(prepared, rubric, free.priors)
                priors = Priors({**(priors.fields if priors is not None else {}),
                                 **{name: (method, free.priors[name]) for name, method in pending.items() if name in free.priors}})
                pending = None
            if captured is not None:
                for index, state in zip(indexes, states):
                    captured[index] = state.captured
            # A request that reports the rubric's preparation (compile, prefix, prior) counts it in its total.
            preparation = {} if prefix_hit else {
                "compile": prepared.compile_ms,
                _PREFIX_TIMING[prepared.prefix_source]: prepared.prefix_ms,
                # A prior read in the request's own pass costs no time of its own.
                **({f"prior_{'load' if prepared.prior_source == 'disk' else 'read'}": prepared.prior_ms}
                   if prepared.prior_source not in ("", "pass") else {}),
            }
            total_ms = (time.perf_counter() - began) * 1000 + sum(preparation.values())
            for index, state in zip(indexes, states):
                stats = Stats(
                    forward_passes=state.passes,
                    tokens_prefilled=state.tokens_fed,
                    input_tokens=len(state.input_tokens),
                    prefix_tokens=len(prepared.compiled.prefix_tokens),
                    prefix_cache_hit=prefix_hit,
                    batch_size=len(indexes),
                    timings_ms={"total": total_ms, "passes": pass_ms, **preparation},
                    prefix_source="memory" if prefix_hit else prepared.prefix_source,
                    device=str(self.backend.device),
                    path=self.backend.path,
                    dtype=str(self.backend.dtype).removeprefix("torch."),
                    kernels=self.backend.kernels,
                )
                outcomes[index] = self._typed_decision(
                    rubric, model_cls, state, stats, index if len(payloads) > 1 else None
                )
                prefix_hit = True
            done += len(indexes)
            if progress:
                progress(done, len(payloads))
        if fail_fast:
            failed = next((o for o in outcomes if isinstance(o, DecisionflowError)), None)
            if failed is not None:
                raise failed
        return outcomes  # type: ignore[return-value]

    def _read_content_free(
        self, rubric: Rubric, inputs: Sequence[str], checkpoint: Checkpoint | None = None,
    ) -> list[Decision | DecisionflowError]:
        """The model's own, uncorrected reading of content-free inputs (what the content-free prior averages)."""
        return self._decide(rubric, list(inputs), progress=None, calibration=None, debias=Debias.NONE,
                            fail_fast=False, internal=True, checkpoint=checkpoint)

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


def backend_for(model: Any, options: EngineOptions) -> Backend:
    """The engine's decoder path where it reproduces the model exactly (its own decoder, or a transformers
    model of the Llama, Mistral, Qwen2 or Qwen3 families without sliding windows or other rope types), else
    the model's own forward (`model_forward`)."""
    from .passes.decoder import DecoderModel, decoder_refusal

    if isinstance(model, DecoderModel):
        return DecoderBackend(model, kernels=options.kernels)
    config = model.config.to_dict() if hasattr(model.config, "to_dict") else {}
    if not options.model_forward and decoder_refusal(config) is None:
        return DecoderBackend(model, kernels=options.kernels)
    from .passes.model_forward import ModelForwardBackend

    return ModelForwardBackend(model)


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
