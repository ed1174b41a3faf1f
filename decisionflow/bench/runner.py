"""`decisionflow bench`'s runner: every method on every workload, interleaved, in one process.

The model is loaded once; every method runs on every workload, interleaved (A B C A B C ...) so slow
drift of a shared machine hits all methods alike, and each method's first call (one warm-up per
method, on the smallest workload) is left out. Agreement is measured against the model's own JSON
answer and the grammar-constrained answer: the presets have no gold labels, so agreement is not
accuracy.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..errors import Unavailable
from .workloads import Workload

if TYPE_CHECKING:
    from ..runtime.engine import Engine

METHODS = (
    "decisionflow",
    "decisionflow_no_pin",
    "decisionflow_exact",
    "decisionflow_generic",
    "json_generate",
    "grammar_constrained",
    "per_field_prefill",
    "copied_prefix",
    "pcd_rlcd",
    "llama_cpp",
    "openai_route",
)
SLOW_METHODS = ("json_generate", "grammar_constrained", "per_field_prefill", "llama_cpp")
"""Token-by-token or one-prefill-per-field methods: repeated fewer times (greedy, so answers repeat)."""


# --------------------------------------------------------------------------------------------
# Memory: the process's peak resident set size around one call


def _status_kb(key: str) -> int | None:
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux `clear_refs` 5); False where that is not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


MEMORY_METHOD = (
    "peak RSS above the RSS at the call's start: /proc/self/clear_refs=5 resets VmHWM before each "
    "call, then VmHWM - VmRSS(before) after it (Linux; torch allocations are invisible to tracemalloc)"
)


def measure(call: Callable[[], Any]) -> tuple[Any, float, float | None]:
    """Run `call`; return (its result, wall milliseconds, peak RSS growth in MiB or None)."""
    import gc

    gc.collect()
    can_reset = _reset_peak()
    before = _status_kb("VmRSS")
    began = time.perf_counter()
    result = call()
    elapsed = (time.perf_counter() - began) * 1000
    peak = _status_kb("VmHWM")
    grown = max(peak - before, 0) / 1024 if can_reset and peak is not None and before is not None else None
    return result, elapsed, grown


# --------------------------------------------------------------------------------------------
# Methods as uniform callables


@dataclass
class Sample:
    latency_ms: float
    valid: bool
    values: dict[str, Any] | None
    forward_passes: int
    prompt_tokens: int
    generated_tokens: int
    peak_mb: float | None
    reason: str = ""


@dataclass
class MethodRunner:
    name: str
    run: Callable[[Workload], Any]
    slow: bool = False
    unavailable: str = ""
    prepare: Callable[[Workload], Any] | None = None
    """Per-rubric set-up kept out of the timings (compiling the rubric or its grammar)."""
    applies: Callable[[Workload], bool] = lambda workload: True
    """Whether the method runs this workload at all (`openai_route`: the workloads sent as structured outputs)."""
    not_applicable: str = ""
    own_floor: Callable[[Workload], float] | None = None
    """The method's own floor in milliseconds, measured beside its runs and out of their timings
    (`llama_cpp`: llama.cpp's bare prefill of the same prompt, nothing cached)."""


def _decisionflow_runner(name: str, engine: Engine) -> MethodRunner:
    def run(workload: Workload) -> Any:
        from ..baselines.generation import MethodResult

        decision = engine.decide(workload.rubric, workload.payload)
        stats = decision.stats
        return MethodResult(
            name, True, {k: f.value for k, f in decision.fields.items()}, stats.forward_passes,
            stats.tokens_prefilled, 0, stats.timings_ms["total"],
        )

    return MethodRunner(name, run)


OpenAIServer = Callable[[], tuple[str, str]]
"""Starts (once) or names a server speaking Chat Completions: its base URL (`http://host:port/v1`) and model name."""


def _openai_route_runner(server: OpenAIServer | None) -> MethodRunner:
    """decisionflow behind `POST /v1/chat/completions`, called with the `openai` SDK as a user's code would:
    the workload's JSON schema as `response_format`, its system message and its text as the user's turn."""
    name = "openai_route"
    if server is None:
        return MethodRunner(name, lambda w: None, unavailable="no server to send requests to")
    try:
        import openai
    except ImportError:
        return MethodRunner(name, lambda w: None, unavailable="the openai SDK is not installed (pip install 'decisionflow[clients]')")
    connection: dict[str, Any] = {}

    def run(workload: Workload) -> Any:
        from ..baselines.generation import MethodResult

        if not connection:
            base_url, model = server()
            connection.update(client=openai.OpenAI(base_url=base_url, api_key="bench", max_retries=0), model=model)
        request = workload.openai
        assert request is not None
        began = time.perf_counter()
        completion = connection["client"].chat.completions.create(
            model=connection["model"], messages=[{"role": "system", "content": request.system},
                                                 {"role": "user", "content": workload.payload}],
            response_format={"type": "json_schema", "json_schema": {"name": request.name, "schema": request.schema, "strict": True}},
        )
        elapsed = (time.perf_counter() - began) * 1000
        values = json.loads(completion.choices[0].message.content)
        problem = _schema_problem(values, request.schema)
        stats = completion.model_extra["decisionflow"]["stats"]
        # Tokens fed in the request, as for `decisionflow` (`usage.prompt_tokens` also counts the cached prefix).
        return MethodResult(name, problem is None, values if problem is None else None, stats["forward_passes"],
                            stats["tokens_prefilled"], 0, elapsed, reason=problem or "")

    return MethodRunner(name, run, applies=lambda w: w.openai is not None,
                        not_applicable="sent as structured outputs only for the openai_* workloads")


def _schema_problem(values: Any, schema: dict[str, Any]) -> str | None:
    """Why a flat answer object breaks a flat schema of booleans and string enums (None when it does not)."""
    properties = schema["properties"]
    if not isinstance(values, dict) or list(values) != list(properties):
        return "the keys are not the schema's, in its order"
    for key, spec in properties.items():
        allowed = [True, False] if spec.get("type") == "boolean" else spec["enum"]
        if not any(values[key] == a and type(values[key]) is type(a) for a in allowed):
            return f"{key}: {values[key]!r} is not allowed"
    return None


def _llama_cpp_runner(engine: Engine) -> MethodRunner:
    """llama.cpp on the engine's GGUF file (`baselines.llama_cpp`): its grammar compiled and its prompt
    cache filled with the rubric's prefix by one untimed call per workload, as a running server's would be."""
    from ..baselines.llama_cpp import LlamaCpp

    name = "llama_cpp"
    try:
        llama = LlamaCpp(engine)
    except Unavailable as exc:
        return MethodRunner(name, lambda w: None, unavailable=str(exc))
    return MethodRunner(name, lambda w: llama(w.rubric, w.payload), slow=True,
                        prepare=lambda w: llama(w.rubric, w.payload), own_floor=lambda w: llama.prefill(w.rubric, w.payload))


GENERATING_METHODS = ("json_generate", "grammar_constrained", "per_field_prefill", "copied_prefix", "decisionflow_generic")
"""Methods that call the transformers model itself (`generate`, its forward with a cache)."""


def make_runners(engine: Engine, methods: list[str], *, baseline_engine: Callable[[], Any] | None = None,
                 openai_server: OpenAIServer | None = None) -> list[MethodRunner]:
    """The methods' runners. decisionflow's run on `engine`, as a user's would; the baselines that need
    the transformers model run on `baseline_engine()` (default: `engine` itself), loaded only when one
    of them is asked for; `openai_route` sends its requests to `openai_server()`, started on first use."""
    from ..baselines import generation, grammar, pcd, prefill
    from ..compiler import ReadMode
    from ..runtime.engine import Engine, EngineOptions

    if any(name in GENERATING_METHODS for name in methods):
        engine_for_baselines = baseline_engine() if baseline_engine is not None else engine
    else:
        engine_for_baselines = engine

    def compile_only(workload: Workload) -> Any:
        return engine_for_baselines.compile(workload.rubric)

    runners: list[MethodRunner] = []
    for name in methods:
        if name == "decisionflow":
            runners.append(_decisionflow_runner(name, engine))
        elif name == "decisionflow_no_pin":
            runners.append(_decisionflow_runner(name, Engine(engine.loaded, options=EngineOptions(pin_first=False))))
        elif name == "decisionflow_exact":
            runners.append(_decisionflow_runner(name, Engine(engine.loaded, options=EngineOptions(mode=ReadMode.EXACT))))
        elif name == "decisionflow_generic":
            # The path every family the engine's decoder does not reproduce takes: the model's own forward.
            runners.append(_decisionflow_runner(name, Engine(engine_for_baselines.loaded, options=EngineOptions(model_forward=True))))
        elif name == "json_generate":
            runners.append(MethodRunner(name, lambda w: generation.json_generate(engine_for_baselines, w.rubric, w.payload), slow=True, prepare=compile_only))
        elif name == "grammar_constrained":
            try:
                constrained = grammar.GrammarConstrained(engine_for_baselines)
                runners.append(MethodRunner(
                    name, lambda w, g=constrained: g(w.rubric, w.payload), slow=True,
                    prepare=lambda w, g=constrained: g.compiled_grammar(engine_for_baselines.compile(w.rubric)[0].rubric),
                ))
            except Unavailable as exc:
                runners.append(MethodRunner(name, lambda w: None, unavailable=str(exc)))
        elif name == "per_field_prefill":
            runners.append(MethodRunner(name, lambda w: prefill.per_field_prefill(engine_for_baselines, w.rubric, w.payload), slow=True, prepare=compile_only))
        elif name == "copied_prefix":
            runners.append(MethodRunner(name, lambda w: prefill.copied_prefix(engine_for_baselines, w.rubric, w.payload)))
        elif name == "pcd_rlcd":
            folder = pcd.converted_model_folder(engine)
            try:
                if folder is None:
                    raise Unavailable("no local HF folder for this model (pcd cannot read GGUF)")
                pcd_engine = pcd.PcdRlcd(folder)
                runners.append(MethodRunner(name, lambda w, p=pcd_engine: p(w.rubric, w.payload, schema=w.pcd_schema)))
            except Unavailable as exc:
                runners.append(MethodRunner(name, lambda w: None, unavailable=str(exc)))
        elif name == "llama_cpp":
            runners.append(_llama_cpp_runner(engine))
        elif name == "openai_route":
            runners.append(_openai_route_runner(openai_server))
        else:
            raise ValueError(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return runners


# --------------------------------------------------------------------------------------------
# The prefill floor: one bare forward over the request's own tokens


@dataclass
class Floor:
    cached_ms: list[float] = field(default_factory=list)
    """One pass over the input + tail tokens on top of the cached prefix (branch attention)."""
    uncached_ms: list[float] = field(default_factory=list)
    """One plain forward over prefix + input + tail, no cache."""


def _floor_calls(engine: Engine, workload: Workload) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from ..runtime.passes.backend import PackedPass, RequestContext

    compiled, _ = engine.compile(workload.rubric)
    request = compiled.request_tokens(workload.payload)
    prefix_tokens = list(compiled.prefix_tokens)
    prefix = engine.backend.prefill_prefix(prefix_tokens)

    def cached() -> Any:
        packed = PackedPass()
        last = -1
        for token in request:
            last = packed.add(token, parent=last, request=0)
        return engine.backend.run_pass(prefix, [RequestContext()], packed, [last])

    def uncached() -> Any:
        return engine.backend.forward_plain(prefix_tokens + request)

    return cached, uncached


# --------------------------------------------------------------------------------------------
# Running and summarising


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _agreement(values: dict[str, Any] | None, reference: dict[str, Any] | None) -> float | None:
    if values is None or reference is None:
        return None
    names = list(reference)
    same = sum(1 for n in names if values.get(n) == reference.get(n) and type(values.get(n)) is type(reference.get(n)))
    return same / len(names)


def _sample(result: Any, elapsed: float, peak: float | None) -> Sample:
    return Sample(
        latency_ms=elapsed, valid=result.valid, values=result.values, forward_passes=result.forward_passes,
        prompt_tokens=result.prompt_tokens, generated_tokens=result.generated_tokens, peak_mb=peak, reason=result.reason,
    )


def run_bench(
    engine: Engine,
    workloads: list[Workload],
    methods: list[str],
    *,
    repeats: int,
    slow_repeats: int,
    log: Callable[[str], None] = lambda _: None,
    on_workload: Callable[[list[dict[str, Any]]], None] | None = None,
    baseline_engine: Callable[[], Any] | None = None,
    openai_server: OpenAIServer | None = None,
) -> list[dict[str, Any]]:
    """Run every method on every workload; `on_workload` gets the rows so far after each workload.
    `baseline_engine`, `openai_server`: see `make_runners`."""
    runners = make_runners(engine, methods, baseline_engine=baseline_engine, openai_server=openai_server)
    # One warm-up per method, on its smallest workload: compiles, prefix caches, grammar, first-call costs.
    for runner in runners:
        if runner.unavailable:
            log(f"{runner.name}: unavailable ({runner.unavailable})")
            continue
        own = [w for w in workloads if runner.applies(w)]
        if not own:
            continue
        smallest = min(own, key=lambda w: (w.fields, len(w.payload)))
        began = time.perf_counter()
        runner.run(smallest)
        log(f"warm-up {runner.name}: {(time.perf_counter() - began) * 1000:.0f} ms")

    rows: list[dict[str, Any]] = []
    for workload in workloads:
        samples: dict[str, list[Sample]] = {r.name: [] for r in runners}
        own_floors: dict[str, list[float]] = {r.name: [] for r in runners}
        floor = Floor()
        cached, uncached = _floor_calls(engine, workload)
        cached()  # the prefix's first pass on this workload's shapes
        failures: dict[str, str] = {}
        for repeat in range(repeats):
            for runner in runners:
                if not runner.applies(workload):
                    failures.setdefault(runner.name, runner.not_applicable)
                    continue
                if runner.unavailable or runner.name in failures or (runner.slow and repeat >= slow_repeats):
                    continue
                try:
                    if repeat == 0:
                        if runner.slow:
                            if runner.prepare is not None:
                                runner.prepare(workload)
                        else:
                            # A warm call: prefix caches and compiled rows are per rubric, and a warm request reuses them.
                            runner.run(workload)
                    result, elapsed, peak = measure(functools.partial(runner.run, workload))
                except Exception as exc:  # noqa: BLE001 - a method that cannot run a workload is a result too
                    failures[runner.name] = f"failed: {type(exc).__name__}: {exc}"
                    log(f"{workload.name} / {runner.name}: {failures[runner.name]}")
                    continue
                samples[runner.name].append(_sample(result, elapsed, peak))
                if runner.own_floor is not None:
                    own_floors[runner.name].append(runner.own_floor(workload))
            floor.cached_ms.append(measure(cached)[1])
            floor.uncached_ms.append(measure(uncached)[1])
        log(f"{workload.name}: " + ", ".join(
            f"{n} {statistics.median(s.latency_ms for s in v):.0f} ms" for n, v in samples.items() if v))
        rows.extend(_summarise(workload, runners, samples, floor, failures, own_floors))
        if on_workload is not None:
            on_workload(rows)
    return rows


def _summarise(
    workload: Workload, runners: list[MethodRunner], samples: dict[str, list[Sample]], floor: Floor, failures: dict[str, str],
    own_floors: dict[str, list[float]] | None = None,
) -> list[dict[str, Any]]:
    def last_valid(name: str) -> dict[str, Any] | None:
        valid = [s for s in samples.get(name, []) if s.valid]
        return valid[-1].values if valid else None

    references = {ref: last_valid(ref) for ref in ("json_generate", "grammar_constrained", "decisionflow")}
    floor_cached = statistics.median(floor.cached_ms)
    floor_uncached = statistics.median(floor.uncached_ms)
    decisionflow_ms = (
        statistics.median(s.latency_ms for s in samples["decisionflow"]) if samples.get("decisionflow") else None
    )
    rows = []
    for runner in runners:
        runs = samples[runner.name]
        base = {"workload": workload.name, "group": workload.group, "fields": workload.fields, "method": runner.name}
        if runner.unavailable or not runs:
            rows.append({**base, "available": False, "reason": runner.unavailable or failures.get(runner.name, "not run")})
            continue
        latencies = [s.latency_ms for s in runs]
        median = statistics.median(latencies)
        valid_runs = [s for s in runs if s.valid]
        values = valid_runs[-1].values if valid_runs else None
        peaks = [s.peak_mb for s in runs if s.peak_mb is not None]
        rows.append({
            **base,
            "available": True,
            "runs": len(runs),
            "median_ms": median,
            "p90_ms": _percentile(latencies, 0.9),
            "forward_passes": statistics.median(s.forward_passes for s in runs),
            "prompt_tokens": statistics.median(s.prompt_tokens for s in runs),
            "generated_tokens": statistics.median(s.generated_tokens for s in runs),
            "peak_rss_mb": max(peaks) if peaks else None,
            "valid_rate": len(valid_runs) / len(runs),
            "agreement": {
                "json_generate": _agreement(values, references["json_generate"]),
                "grammar_constrained": _agreement(values, references["grammar_constrained"]),
                "decisionflow": _agreement(values, references["decisionflow"]),
            },
            "floor_ms": floor_cached,
            "floor_uncached_ms": floor_uncached,
            "floor_ratio": median / floor_cached,
            "floor_ratio_uncached": median / floor_uncached,
            "vs_decisionflow": median / decisionflow_ms if decisionflow_ms else None,
            "own_floor_ms": statistics.median(own_floors[runner.name]) if own_floors and own_floors.get(runner.name) else None,
            "invalid_reason": next((s.reason for s in runs if not s.valid), ""),
            "values": values,
        })
    return rows


def model_implementation(model: Any) -> str:
    """Which modules decisionflow's methods ran on: its own decoder (packed for oneDNN or not) or transformers'."""
    from ..runtime.passes.decoder import DecoderModel, is_packed

    if not isinstance(model, DecoderModel):
        return f"transformers {type(model).__name__}"
    return "decisionflow decoder, oneDNN-packed projections" if is_packed(model) else "decisionflow decoder"


CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
"""The instruction sets a CPU figure depends on (bfloat16 in hardware, AMX tiles), named with every run."""


def conditions(engine: Engine, *, threads: int, dtype: str, repeats: int, slow_repeats: int) -> dict[str, Any]:
    import torch
    import transformers

    from ..runtime.model.loading import cpu_flags, cpu_model

    flags = [flag for flag in CPU_FLAGS if flag in cpu_flags()]
    versions: dict[str, str] = {"torch": torch.__version__, "transformers": transformers.__version__}
    for package in ("xgrammar", "pcd_rlcd", "llama_cpp_python"):
        try:
            from importlib.metadata import version

            versions[package] = version(package.replace("_", "-"))
        except Exception:  # noqa: BLE001 - not installed
            versions[package] = "not installed"
    return {
        "model": engine.loaded.name,
        "implementation": model_implementation(engine.loaded.model),
        "device": str(engine.backend.device),
        "dtype": dtype,
        "kernels": engine.backend.kernels,
        "threads": threads,
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "repeats": repeats,
        "slow_repeats": slow_repeats,
        "warm_up": "one call per method excluded (smallest workload), plus one per workload for the fast methods",
        "memory": MEMORY_METHOD,
        "floor": "one pass over the request's own tokens after the cached prefix (backend.run_pass); "
                 "floor_uncached: one plain forward over prefix + request, no cache",
    }
