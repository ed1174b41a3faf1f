"""The engine's prepared rubrics: what a rubric costs once, kept for every later request.

Preparing a rubric means compiling it (prompt, layout probe, answer tries) and planning its rounds,
then, on its first request, getting its prefix's KV cache (from the disk store, else by one prefill
that is then stored) and, when a readout correction needs it, its content-free prior (the mean
distribution over content-free inputs, also stored on disk). `PreparedRubrics` keeps these in a
least-recently-used cache bounded by count and by the bytes the prefix caches hold (the rubric in use
and pinned rubrics, such as the ones a server offers by name, are always kept); two threads asking
for the same new rubric prepare it once. A caller may check a compiled rubric before it is kept
(`get(rubric, check=...)`): one it refuses costs its compilation and nothing else.

Work nobody waits for any more can be stopped between phases (a `Checkpoint`, which a server's requests
carry): the prefix prefill and the content-free reading each ask it before they begin. A stopped phase
leaves nothing behind but what was finished before it (a compiled rubric, a prefilled prefix), each a
state any later call starts from, and the next call that needs the rest does it.

It also chooses, per request, the prior each field's reading is divided by (`priors`), because the
content-free priors it holds are one of the sources.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..compiler import Catalog, CompiledRubric, ReadMode, TokenizerView, compile_independent, compile_rubric
from ..errors import CalibrationError
from ..spec.kinds import Reading
from ..spec.plan import Plan, make_plan, split_by_tokens
from ..spec.rubric import Rubric
from .heads.fitted import Heads
from .passes.backend import PrefixCache
from .passes.protocol import Backend
from .prefix_store import PrefixStore, legacy_folders
from .readout.calibration import Calibration
from .readout.debias import CONTENT_FREE_BY_READING, DEFAULT_BY_READING, Debias, Priors, mean_distribution
from .result import Decision

PreparedKey = tuple[str, str, str, bool | None]
INDEPENDENT_ROW_TOKENS = 4096
"""Tokens of rows one request's pass carries when its fields are independent questions (each row holds its
question): a larger question set is read in several passes, each seeing the input only."""
Checkpoint = Callable[[str], None]
"""Called with the phase about to begin (`prefix`: the prefix prefill; `prior`: the content-free reading; `pass`:
a forward pass of the inputs); raising stops the work there, and the exception reaches the caller."""
ContentFreeReader = Callable[[Rubric, Sequence[str], "Checkpoint | None"], list[Any]]
"""Decides content-free inputs with the rubric, uncorrected: one `Decision` (or error) per input. The
checkpoint, when given, is asked before each of the reading's passes."""


@dataclass
class PreparedRubric:
    compiled: CompiledRubric
    plan: Plan
    prefix: PrefixCache | None = None
    prefix_ms: float = 0.0
    prefix_source: str = ""
    """How the prefix was obtained the first time: `prefill` or `disk`."""
    compile_ms: float = 0.0
    content_free: dict[str, tuple[float, ...]] | None = None
    """Per field, its mean distribution over content-free inputs (the contextual-calibration prior)."""
    prior_ms: float = 0.0
    prior_source: str = ""
    """How the content-free prior was obtained: `decided` (the content-free inputs were read apart), `pass`
    (read in a request's own pass, beside its input: independent questions) or `disk`."""
    preparation_reported: bool = False
    """Whether a request has already reported what preparing the rubric cost (compile, prefix, prior)."""
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
    def prefix_bytes(self) -> int:
        if self.prefix is None:
            return 0
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.prefix.kv)

    @property
    def head(self) -> PrefixCache | None:
        """Deprecated: the earlier name of `prefix`."""
        return self.prefix


@dataclass
class CacheCounts:
    """What the cache has done since it was made (the server's metrics read these)."""

    hits: int = 0
    prepared: int = 0
    """Rubrics compiled (a miss)."""
    prefixes_prefilled: int = 0
    prefixes_loaded: int = 0
    evicted: int = 0


class PreparedRubrics:
    """Prepared rubrics keyed by everything that shapes their compiled prompt, rows and plan."""

    def __init__(
        self,
        backend: Backend,
        view: TokenizerView,
        *,
        mode: ReadMode,
        catalog: Catalog,
        pin_first: bool | None,
        max_prepared: int,
        max_prefix_bytes: int,
        default_debias: Debias | None,
        store_folder: Path | None,
        store_bytes: int,
        fingerprint: Callable[[], str],
        read_content_free: ContentFreeReader,
    ):
        self.backend = backend
        self.view = view
        self.mode, self.catalog, self.pin_first = mode, catalog, pin_first
        self.max_prepared, self.max_prefix_bytes = max_prepared, max_prefix_bytes
        self.default_debias = default_debias
        self.counts = CacheCounts()
        self._store_folder, self._store_bytes, self._fingerprint = store_folder, store_bytes, fingerprint
        self._store: PrefixStore | None = None
        self._read_content_free = read_content_free
        self._entries: OrderedDict[PreparedKey, PreparedRubric] = OrderedDict()
        self._pinned: set[PreparedKey] = set()
        self._lock = threading.Lock()

    # -- what is held ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, target: Any) -> bool:
        """Whether a rubric (or a decorated class, as `decide` takes it) is prepared."""
        from ..spec.declare import rubric_of

        return self.key(rubric_of(target)) in self._entries

    def values(self) -> Iterator[PreparedRubric]:
        with self._lock:
            return iter(list(self._entries.values()))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def pin(self, rubric: Rubric) -> None:
        """Never evict `rubric` once prepared (it still counts toward the budgets)."""
        with self._lock:
            self._pinned.add(self.key(rubric))

    @property
    def prefix_bytes(self) -> int:
        """Bytes of the prefix KV caches held across prepared rubrics."""
        with self._lock:
            return _distinct_prefix_bytes(self._entries.values())

    @property
    def head_bytes(self) -> int:
        """Deprecated: the earlier name of `prefix_bytes`."""
        return self.prefix_bytes

    @property
    def store(self) -> PrefixStore | None:
        """The disk store of prefix caches and priors (None when they are kept in memory only)."""
        if self._store is None and self._store_folder is not None:
            self._store = PrefixStore(self._store_folder, fingerprint=self._fingerprint(), dtype=self.backend.dtype,
                                      max_bytes=self._store_bytes, legacy=legacy_folders(self._store_folder))
        return self._store

    def peek(self, rubric: Rubric) -> PreparedRubric | None:
        """The rubric as prepared so far, or None; never compiles, never counts as a use."""
        return self._entries.get(self.key(rubric))

    def key(self, rubric: Rubric) -> PreparedKey:
        """Everything that shapes a rubric's compiled prompt, rows and plan in this engine."""
        return (rubric.key, self.mode.value, self.catalog.value, self.pin_first)

    # -- preparing ---------------------------------------------------------------------------

    def compile(self, rubric: Rubric) -> CompiledRubric:
        """The rubric compiled as `get` compiles it, without keeping it (no cache entry, no count)."""
        if rubric.reading is Reading.INDEPENDENT:
            return compile_independent(self.view.tokenizer, rubric, mode=self.mode, view=self.view, catalog=self.catalog)
        return compile_rubric(self.view.tokenizer, rubric, mode=self.mode, view=self.view, catalog=self.catalog,
                              pin_first=self.pin_first)

    def plan(self, rubric: Rubric, compiled: CompiledRubric) -> Plan:
        """The rubric's rounds; independent questions are cut into passes by their rows' tokens."""
        plan = make_plan(rubric, pin_first=self.pin_first)
        if rubric.reading is Reading.INDEPENDENT:
            plan = split_by_tokens(plan, {name: f.row_length for name, f in compiled.fields.items()}, INDEPENDENT_ROW_TOKENS)
        return plan

    def get(self, rubric: Rubric, *, check: Callable[[PreparedRubric], None] | None = None) -> PreparedRubric:
        """The rubric compiled and planned (its prefix comes with `ensure_prefix`). `check` sees a newly
        compiled rubric before it is kept and may refuse it by raising: nothing is then cached."""
        key = self.key(rubric)
        with self._lock:
            prepared = self._entries.get(key)
            if prepared is not None:
                self._entries.move_to_end(key)
                self.counts.hits += 1
                return prepared
        began = time.perf_counter()
        compiled = self.compile(rubric)
        plan = self.plan(rubric, compiled)
        compile_ms = (time.perf_counter() - began) * 1000
        made = PreparedRubric(compiled, plan, compile_ms=compile_ms)
        if check is not None:
            check(made)
        with self._lock:
            # Another thread may have prepared the same rubric meanwhile: keep the first one.
            if key not in self._entries:
                self.counts.prepared += 1
            prepared = self._entries.setdefault(key, made)
            self._entries.move_to_end(key)
            self._evict(keep=key)
        return prepared

    def ensure_prefix(self, prepared: PreparedRubric, *, checkpoint: Checkpoint | None = None) -> None:
        """Get the rubric's prefix cache once (other threads wait for it): from the disk store when it has
        it, else by a prefill that is then stored. `checkpoint("prefix")` is asked before a prefill."""
        if prepared.prefix is not None:
            return
        with prepared.lock:
            if prepared.prefix is not None:
                return
            began = time.perf_counter()
            tokens = prepared.compiled.prefix_tokens
            prefix = self._prefix_held(tokens)
            store = self.store
            prepared.prefix_source = "memory"
            if prefix is None:
                prefix = store.load(tokens, layers=self.backend.layer_count, device=self.backend.device) if store else None
                prepared.prefix_source = "disk" if prefix is not None else "prefill"
            if prefix is None:
                if checkpoint is not None:
                    checkpoint("prefix")
                prefix = self.backend.prefill_prefix(list(tokens))
                if store is not None:
                    store.save(tokens, prefix)
            prepared.prefix = prefix
            prepared.prefix_ms = (time.perf_counter() - began) * 1000
        with self._lock:
            if prepared.prefix_source == "disk":
                self.counts.prefixes_loaded += 1
            elif prepared.prefix_source == "prefill":
                self.counts.prefixes_prefilled += 1
            self._evict(keep=next((k for k, p in self._entries.items() if p is prepared), None))

    def _prefix_held(self, tokens: tuple[int, ...]) -> PrefixCache | None:
        """A prefix cache another prepared rubric holds for the same tokens (every independent question set
        with the same instructions has one prefix): shared, not computed or loaded again."""
        with self._lock:
            return next((p.prefix for p in self._entries.values() if p.prefix is not None and p.compiled.prefix_tokens == tokens),
                        None)

    def _evict(self, *, keep: Any) -> None:
        """Drop least recently used rubrics beyond the count and prefix-byte budgets (caller holds the lock)."""
        def over() -> bool:
            prefixes = _distinct_prefix_bytes(self._entries.values())
            return len(self._entries) > self.max_prepared or prefixes > self.max_prefix_bytes

        for key in list(self._entries):
            if not over():
                break
            if key != keep and key not in self._pinned:
                del self._entries[key]
                self.counts.evicted += 1

    # -- priors ------------------------------------------------------------------------------

    def priors(
        self, prepared: PreparedRubric, rubric: Rubric, call: Debias | str | None, calibration: Calibration | None,
        heads: Heads | None = None, *, checkpoint: Checkpoint | None = None,
        pending: dict[str, Debias] | None = None,
    ) -> Priors | None:
        """The prior each field is divided by. Per field the method is the one its fitted head was fitted
        under (its features include the corrected readout), else the call's, else the one the
        calibration was fitted under, else the field's, else the rubric's, else the engine's: content-free
        priors are estimated once per rubric; domain priors come from the calibration file (refused when
        it has none for that field). `checkpoint` is asked before the prefix prefill and the content-free reading
        a first call may need. `pending`, when given, receives the fields whose content-free prior is neither
        held nor stored (field -> correction) instead of that prior being read here: the caller reads it in the
        pass that reads the fields (`executor.FreeReading`) and keeps it with `keep_content_free`."""
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
                         or self.default_for(rubric))
            for name, spec in rubric.fields.items()
        }
        if all(method is Debias.NONE for method in methods.values()):
            return None
        wanted = any(method.uses_content_free_prior for method in methods.values())
        if wanted and pending is not None and not self.holds_content_free(prepared, rubric):
            # The caller reads the content-free inputs in its own pass (`executor.FreeReading`).
            pending.update({name: method for name, method in methods.items()
                            if method.uses_content_free_prior and rubric.fields[name].derive is None})
            wanted = False
        content_free = self.content_free_prior(prepared, rubric, checkpoint=checkpoint) if wanted else {}
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

    def reads_content_free(self, rubric: Rubric) -> bool:
        """Whether a call without a correction, calibration or heads of its own reads the rubric's content-free
        prior (its first call then prepares that too, after the prefix)."""
        return any(Debias(spec.debias or rubric.debias or self.default_for(rubric)).uses_content_free_prior
                   for spec in rubric.fields.values())

    def default_for(self, rubric: Rubric) -> Debias:
        """The engine's correction where it names one, else the default of the rubric's reading."""
        return self.default_debias or DEFAULT_BY_READING[rubric.reading]

    def holds_content_free(self, prepared: PreparedRubric, rubric: Rubric) -> bool:
        """Whether the rubric's content-free prior is known without reading it: held, or stored on disk (then loaded)."""
        if prepared.content_free is not None:
            return True
        store = self.store
        if store is None:
            return False
        with prepared.prior_lock:
            if prepared.content_free is None:
                began = time.perf_counter()
                stored = store.load_prior(prepared.compiled.prefix_tokens, self.prior_identity(prepared, rubric))
                if stored is None:
                    return False
                prepared.content_free, prepared.prior_source = stored, "disk"
                prepared.prior_ms = (time.perf_counter() - began) * 1000
        return True

    def keep_content_free(self, prepared: PreparedRubric, rubric: Rubric, priors: dict[str, tuple[float, ...]]) -> None:
        """Keep a content-free prior read in a request's own pass (see `priors`' `pending`), and store it."""
        with prepared.prior_lock:
            if prepared.content_free is not None:
                return
            prepared.content_free, prepared.prior_source, prepared.prior_ms = dict(priors), "pass", 0.0
            if self.store is not None:
                self.store.save_prior(prepared.compiled.prefix_tokens, self.prior_identity(prepared, rubric), prepared.content_free)

    def content_free_prior(
        self, prepared: PreparedRubric, rubric: Rubric, *, checkpoint: Checkpoint | None = None,
    ) -> dict[str, tuple[float, ...]]:
        """Each field's mean distribution over the content-free inputs, computed once per rubric.
        `checkpoint`: asked before the prefix prefill (`prefix`), then before each pass of the reading (`prior`)."""
        if prepared.content_free is not None:
            return prepared.content_free
        with prepared.prior_lock:
            if prepared.content_free is None:
                self.ensure_prefix(prepared, checkpoint=checkpoint)  # first, so that the prior's time is its own reading only
                began = time.perf_counter()
                prefix_tokens, identity = prepared.compiled.prefix_tokens, self.prior_identity(prepared, rubric)
                store = self.store
                stored = store.load_prior(prefix_tokens, identity) if store is not None else None
                if stored is not None:
                    prepared.content_free, prepared.prior_source = stored, "disk"
                    prepared.prior_ms = (time.perf_counter() - began) * 1000
                    return stored
                reading = None if checkpoint is None else lambda _phase: checkpoint("prior")
                decided = [o for o in self._read_content_free(rubric, CONTENT_FREE_BY_READING[rubric.reading], reading) if isinstance(o, Decision)]
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
                    store.save_prior(prefix_tokens, identity, priors)
        return prepared.content_free

    def prior_identity(self, prepared: PreparedRubric, rubric: Rubric) -> dict[str, Any]:
        """What a rubric's content-free priors depend on besides its prefix, the model and the dtype: the
        inputs read and the tokens that read them (each input's request, every field's row), so that a prior
        stored before a change to how a rubric is written out is never read for the new prompt."""
        compiled = prepared.compiled
        inputs = CONTENT_FREE_BY_READING[rubric.reading]
        reading = {"requests": [compiled.request_tokens(text) for text in inputs],
                   "rows": {name: [field.row_tokens, field.row_parents, field.read_positions]
                            for name, field in compiled.fields.items()}}
        digest = hashlib.sha256(json.dumps(reading, separators=(",", ":")).encode()).hexdigest()
        return {"inputs": list(inputs), "prepared": list(self.key(rubric)), "tokens": digest}


def _distinct_prefix_bytes(entries: Any) -> int:
    """Bytes of the prefix caches held, a cache shared by several rubrics counted once."""
    return sum({id(p.prefix): p.prefix_bytes for p in entries if p.prefix is not None}.values())
