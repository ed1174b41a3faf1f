"""`decisionflow bench`: decisionflow against the usual baselines, side by side in one process.

The model is loaded once; every method runs on every workload, interleaved (A B C A B C ...) so slow
drift of a shared machine hits all methods alike, and each method's first call (one warm-up per
method, on the smallest workload) is left out. Agreement is measured against the model's own JSON
answer and the grammar-constrained answer: the presets have no gold labels, so agreement is not
accuracy.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable

import typer

from .presets import PRESET_NAMES, default_data_dir, first_fields, load_preset
from .rubric import Rubric

REPO_ROOT = Path(__file__).resolve().parent.parent

METHODS = (
    "decisionflow",
    "decisionflow_no_pin",
    "decisionflow_exact",
    "json_generate",
    "grammar_constrained",
    "per_field_prefill",
    "copied_prefix",
    "pcd_rlcd",
)
SLOW_METHODS = ("json_generate", "grammar_constrained", "per_field_prefill")
"""Token-by-token or one-prefill-per-field methods: repeated fewer times (greedy, so answers repeat)."""
SWEEP_COUNTS = (1, 4, 8, 16, 28)
SWEEP_PRESET = "support_triage"

SUPPORT_TICKET = """\
From: Priya Raman <priya.raman@northwind-logistics.com> (Enterprise plan, 1,200 seats)
Subject: URGENT: dashboard API returning 502 since 09:40 UTC, and we were billed twice this month

Hello,

Since 09:40 UTC today every call to your reporting API (https://api.example-saas.com/v2/reports)
from our production warehouse system fails with "502 Bad Gateway". Our dispatchers cannot print
shipping manifests, so about 300 trucks are waiting at three depots. Your status page still says
"All systems operational". We have not changed anything on our side; requests from our EU and US
offices fail the same way.

Separately, our finance team noticed that invoice INV-2026-0412 ($18,400) was charged twice to the
company card on April 2nd. Please refund the duplicate charge.

Our contract promises 99.95% uptime and a one-hour response for priority-one incidents. If this is
not fixed today we will ask our legal team to review the service credits we are owed.

Regards,
Priya Raman, Head of IT Operations"""

FRAUD_ALERT = """\
ALERT #TXN-88213 (card-not-present, real-time scoring)
Cardholder: account opened 2019, home country Germany, usual spend 20-150 EUR per purchase,
typically 2-3 card purchases a week, all from one iPhone and one Windows laptop.

Timeline (UTC):
02:11:04  $1.00   authorisation, merchant "QuickPay Gift Cards", country Panama        approved
02:11:39  $1.00   authorisation, same merchant                                          approved
02:12:15  $9,850.00 purchase, merchant "CoinBridge Exchange" (crypto exchange, Seychelles) pending
Device: new Android emulator fingerprint, never seen on this account
IP: 185.220.101.44 (listed Tor exit node), geolocated to the Netherlands
3-D Secure: one-time passcode step skipped after a password reset requested from the same device
at 02:09:50. The cardholder's registered phone number was changed at 02:08:12.
Merchant CoinBridge Exchange has 14 chargebacks in the last 30 days from other issuers and appears
on an internal watch list; no sanctions-list match for the merchant or the cardholder."""

ROUTING_PROMPT = (
    "My Python script reads a 2 GB CSV with pandas and crashes with MemoryError on my laptop. "
    "Here is the line: df = pd.read_csv('events.csv'). How can I process the file in chunks and "
    "still compute the daily totals per customer?"
)


@dataclass
class Workload:
    name: str
    rubric: Rubric
    payload: str
    group: str
    """`preset`, `workflow`, `routing` or `sweep`."""
    pcd_schema: dict[str, Any] | None = None
    """The preset's own schema, handed to pcd as is."""

    @property
    def fields(self) -> int:
        return len(self.rubric)


def build_workloads(data_dir: Path, *, quick: bool = False) -> list[Workload]:
    """The benchmark's inputs; `quick` keeps the one-field routing case and 4 support_triage fields."""
    from .rubric_yaml import load_rubric

    routing = load_rubric(REPO_ROOT / "workflows" / "model_routing.yaml")
    routing_one = first_fields(routing, 1)
    routing_case = Workload("model_routing_route", routing_one, ROUTING_PROMPT, "routing")
    sweep = load_preset(SWEEP_PRESET, data_dir)

    def sweep_case(count: int) -> Workload:
        sub = first_fields(sweep.rubric, count)
        schema = {k: sweep.schema[k] for k in sub.fields}
        return Workload(f"{SWEEP_PRESET}_first_{count}", sub, sweep.context, "sweep", schema)

    if quick:
        return [routing_case, sweep_case(4)]

    workloads: list[Workload] = []
    for name in PRESET_NAMES:
        preset = load_preset(name, data_dir)
        workloads.append(Workload(preset.name, preset.rubric, preset.context, "preset", preset.schema))
    workloads.append(Workload("workflow_support_triage", load_rubric(REPO_ROOT / "workflows" / "support_triage.yaml"), SUPPORT_TICKET, "workflow"))
    workloads.append(Workload("workflow_fintech_fraud", load_rubric(REPO_ROOT / "workflows" / "fintech_fraud.yaml"), FRAUD_ALERT, "workflow"))
    workloads.append(routing_case)
    for count in SWEEP_COUNTS:
        if count < len(sweep.rubric):  # the full preset is already a workload: the sweep's last point
            workloads.append(sweep_case(count))
    return workloads


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


def _decisionflow_runner(name: str, engine: Any) -> MethodRunner:
    def run(workload: Workload) -> Any:
        from .baselines import MethodResult

        decision = engine.decide(workload.rubric, workload.payload)
        stats = decision.stats
        return MethodResult(
            name, True, {k: f.value for k, f in decision.fields.items()}, stats.forward_passes,
            stats.tokens_prefilled, 0, stats.timings_ms["total"],
        )

    return MethodRunner(name, run)


def make_runners(engine: Any, methods: list[str]) -> list[MethodRunner]:
    from . import baselines
    from .engine import Engine, EngineOptions
    from .compiler import ReadMode

    def compile_only(workload: Workload) -> Any:
        return engine.compile(workload.rubric)

    runners: list[MethodRunner] = []
    for name in methods:
        if name == "decisionflow":
            runners.append(_decisionflow_runner(name, engine))
        elif name == "decisionflow_no_pin":
            runners.append(_decisionflow_runner(name, Engine(engine.loaded, options=EngineOptions(pin_first=False))))
        elif name == "decisionflow_exact":
            runners.append(_decisionflow_runner(name, Engine(engine.loaded, options=EngineOptions(mode=ReadMode.EXACT))))
        elif name == "json_generate":
            runners.append(MethodRunner(name, lambda w: baselines.json_generate(engine, w.rubric, w.payload), slow=True, prepare=compile_only))
        elif name == "grammar_constrained":
            try:
                grammar = baselines.GrammarConstrained(engine)
                runners.append(MethodRunner(
                    name, lambda w, g=grammar: g(w.rubric, w.payload), slow=True,
                    prepare=lambda w, g=grammar: g.compiled_grammar(engine.compile(w.rubric)[0].rubric),
                ))
            except baselines.Unavailable as exc:
                runners.append(MethodRunner(name, lambda w: None, unavailable=str(exc)))
        elif name == "per_field_prefill":
            runners.append(MethodRunner(name, lambda w: baselines.per_field_prefill(engine, w.rubric, w.payload), slow=True, prepare=compile_only))
        elif name == "copied_prefix":
            runners.append(MethodRunner(name, lambda w: baselines.copied_prefix(engine, w.rubric, w.payload)))
        elif name == "pcd_rlcd":
            folder = baselines.converted_model_folder(engine)
            try:
                if folder is None:
                    raise baselines.Unavailable("no local HF folder for this model (pcd cannot read GGUF)")
                pcd = baselines.PcdRlcd(folder)
                runners.append(MethodRunner(name, lambda w, p=pcd: p(w.rubric, w.payload, schema=w.pcd_schema)))
            except baselines.Unavailable as exc:
                runners.append(MethodRunner(name, lambda w: None, unavailable=str(exc)))
        else:
            raise typer.BadParameter(f"unknown method {name!r} (known: {', '.join(METHODS)})")
    return runners


# --------------------------------------------------------------------------------------------
# The prefill floor: one bare forward over the request's own tokens


@dataclass
class Floor:
    cached_ms: list[float] = field(default_factory=list)
    """One pass over the input + tail tokens on top of the cached head (branch attention)."""
    uncached_ms: list[float] = field(default_factory=list)
    """One plain forward over head + input + tail, no cache."""


def _floor_calls(engine: Any, workload: Workload) -> tuple[Callable[[], Any], Callable[[], Any]]:
    from .backend import PackedPass, RequestContext

    compiled, _ = engine.compile(workload.rubric)
    request = compiled.request_tokens(workload.payload)
    head_tokens = list(compiled.head_tokens)
    head = engine.backend.prefill_head(head_tokens)

    def cached() -> Any:
        packed = PackedPass()
        last = -1
        for token in request:
            last = packed.add(token, parent=last, request=0)
        return engine.backend.run_pass(head, [RequestContext()], packed, [last])

    def uncached() -> Any:
        return engine.backend.forward_plain(head_tokens + request)

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
    engine: Any,
    workloads: list[Workload],
    methods: list[str],
    *,
    repeats: int,
    slow_repeats: int,
    log: Callable[[str], None] = lambda _: None,
    on_workload: Callable[[list[dict[str, Any]]], None] | None = None,
) -> list[dict[str, Any]]:
    """Run every method on every workload; `on_workload` gets the rows so far after each workload."""
    runners = make_runners(engine, methods)
    # One warm-up per method, on the smallest workload: compiles, head caches, grammar, first-call costs.
    smallest = min(workloads, key=lambda w: (w.fields, len(w.payload)))
    for runner in runners:
        if runner.unavailable:
            log(f"{runner.name}: unavailable ({runner.unavailable})")
            continue
        began = time.perf_counter()
        runner.run(smallest)
        log(f"warm-up {runner.name}: {(time.perf_counter() - began) * 1000:.0f} ms")

    rows: list[dict[str, Any]] = []
    for workload in workloads:
        samples: dict[str, list[Sample]] = {r.name: [] for r in runners}
        floor = Floor()
        cached, uncached = _floor_calls(engine, workload)
        cached()  # the head's first pass on this workload's shapes
        failures: dict[str, str] = {}
        for repeat in range(repeats):
            for runner in runners:
                if runner.unavailable or runner.name in failures or (runner.slow and repeat >= slow_repeats):
                    continue
                try:
                    if repeat == 0:
                        if runner.slow:
                            if runner.prepare is not None:
                                runner.prepare(workload)
                        else:
                            # A warm call: head caches and compiled rows are per rubric, and a warm request reuses them.
                            runner.run(workload)
                    result, elapsed, peak = measure(lambda: runner.run(workload))
                except Exception as exc:  # noqa: BLE001 - a method that cannot run a workload is a result too
                    failures[runner.name] = f"failed: {type(exc).__name__}: {exc}"
                    log(f"{workload.name} / {runner.name}: {failures[runner.name]}")
                    continue
                samples[runner.name].append(_sample(result, elapsed, peak))
            floor.cached_ms.append(measure(cached)[1])
            floor.uncached_ms.append(measure(uncached)[1])
        log(f"{workload.name}: " + ", ".join(
            f"{n} {statistics.median(s.latency_ms for s in v):.0f} ms" for n, v in samples.items() if v))
        rows.extend(_summarise(workload, runners, samples, floor, failures))
        if on_workload is not None:
            on_workload(rows)
    return rows


def _summarise(
    workload: Workload, runners: list[MethodRunner], samples: dict[str, list[Sample]], floor: Floor, failures: dict[str, str]
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
            "invalid_reason": next((s.reason for s in runs if not s.valid), ""),
            "values": values,
        })
    return rows


def conditions(engine: Any, *, threads: int, dtype: str, repeats: int, slow_repeats: int) -> dict[str, Any]:
    import torch
    import transformers

    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    versions: dict[str, str] = {"torch": torch.__version__, "transformers": transformers.__version__}
    for package in ("xgrammar", "pcd_rlcd"):
        try:
            from importlib.metadata import version

            versions[package] = version(package.replace("_", "-"))
        except Exception:  # noqa: BLE001 - not installed
            versions[package] = "not installed"
    return {
        "model": engine.loaded.name,
        "dtype": dtype,
        "threads": threads,
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "repeats": repeats,
        "slow_repeats": slow_repeats,
        "warm_up": "one call per method excluded (smallest workload), plus one per workload for the fast methods",
        "memory": MEMORY_METHOD,
        "floor": "one pass over the request's own tokens after the cached head (backend.run_pass); "
                 "floor_uncached: one plain forward over head + request, no cache",
    }


# --------------------------------------------------------------------------------------------
# Output: table, JSON, plots


def _fmt(value: Any, spec: str = ".0f") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def print_table(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="decisionflow bench (warm medians)", show_lines=False)
    for column, justify in (
        ("workload", "left"), ("fields", "right"), ("method", "left"), ("median ms", "right"), ("p90 ms", "right"),
        ("passes", "right"), ("prompt tok", "right"), ("gen tok", "right"), ("peak MiB", "right"),
        ("valid", "right"), ("agree json", "right"), ("agree grammar", "right"), ("x floor", "right"),
        ("x decisionflow", "right"),
    ):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    previous = None
    for row in rows:
        if previous is not None and row["workload"] != previous:
            table.add_section()
        previous = row["workload"]
        if not row.get("available", True):
            table.add_row(row["workload"], str(row["fields"]), row["method"], f"unavailable: {row['reason'][:60]}")
            continue
        agree = row["agreement"]
        table.add_row(
            row["workload"], str(row["fields"]), row["method"], _fmt(row["median_ms"]), _fmt(row["p90_ms"]),
            _fmt(row["forward_passes"]), _fmt(row["prompt_tokens"]), _fmt(row["generated_tokens"]),
            _fmt(row["peak_rss_mb"]), _fmt(row["valid_rate"], ".0%"), _fmt(agree["json_generate"], ".2f"),
            _fmt(agree["grammar_constrained"], ".2f"), _fmt(row["floor_ratio"], ".2f"), _fmt(row["vs_decisionflow"], ".1f"),
        )
    # A pipe gets a wide console: the table has many columns and is meant to be read in a log.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """The results as a Markdown table (for docs/benchmarks.md)."""
    header = (
        "| workload | fields | method | median ms | p90 ms | passes | prompt tok | gen tok | peak MiB | valid "
        "| agree json | agree grammar | agree decisionflow | x floor | x decisionflow |"
    )
    lines = [header, "|" + " --- |" * (header.count("|") - 1)]
    for row in rows:
        if not row.get("available", True):
            lines.append(f"| {row['workload']} | {row['fields']} | {row['method']} | {row['reason'][:90]} |" + " |" * 11)
            continue
        agree = row["agreement"]
        lines.append("| " + " | ".join([
            row["workload"], str(row["fields"]), row["method"], _fmt(row["median_ms"]), _fmt(row["p90_ms"]),
            _fmt(row["forward_passes"]), _fmt(row["prompt_tokens"]), _fmt(row["generated_tokens"]),
            _fmt(row["peak_rss_mb"]), _fmt(row["valid_rate"], ".0%"), _fmt(agree["json_generate"], ".2f"),
            _fmt(agree["grammar_constrained"], ".2f"), _fmt(agree["decisionflow"], ".2f"),
            _fmt(row["floor_ratio"], ".2f"), _fmt(row["vs_decisionflow"], ".1f"),
        ]) + " |")
    return "\n".join(lines) + "\n"


def write_plots(rows: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written: list[Path] = []
    measured = [r for r in rows if r.get("available", True)]
    workloads = list(dict.fromkeys(r["workload"] for r in measured))
    methods = list(dict.fromkeys(r["method"] for r in measured))
    figure, axis = plt.subplots(figsize=(max(8, 1.4 * len(workloads)), 5))
    width = 0.8 / max(len(methods), 1)
    for m, method in enumerate(methods):
        heights = [next((r["median_ms"] for r in measured if r["workload"] == w and r["method"] == method), 0) for w in workloads]
        axis.bar([i + m * width for i in range(len(workloads))], heights, width, label=method)
    axis.set_yscale("log")
    axis.set_ylabel("warm median latency (ms, log scale)")
    axis.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))])
    axis.set_xticklabels(workloads, rotation=30, ha="right", fontsize=8)
    axis.legend(fontsize=7, ncol=2)
    axis.set_title("Latency by method per workload")
    figure.tight_layout()
    path = out / "latency_by_method.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    written.append(path)

    sweep = [r for r in measured if r["group"] == "sweep" or r["workload"] == SWEEP_PRESET]
    if len({r["fields"] for r in sweep}) > 1:
        figure, axis = plt.subplots(figsize=(7, 5))
        for method in methods:
            points = sorted((r["fields"], r["median_ms"]) for r in sweep if r["method"] == method)
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=method)
        floor = sorted({(r["fields"], r["floor_ms"]) for r in sweep})
        axis.plot([p[0] for p in floor], [p[1] for p in floor], linestyle="--", color="black", label="floor (1 pass over input)")
        axis.set_yscale("log")
        axis.set_xlabel(f"fields (first N of {SWEEP_PRESET})")
        axis.set_ylabel("warm median latency (ms, log scale)")
        axis.set_title("Latency vs field count")
        axis.legend(fontsize=7)
        figure.tight_layout()
        path = out / "latency_vs_fields.png"
        figure.savefig(path, dpi=120)
        plt.close(figure)
        written.append(path)
    return written


def bench_command(
    data: Annotated[Path | None, typer.Option(help="Data folder holding pcd_presets/ (default: $DECISIONFLOW_DATA or ../shared/data next to the repository).", show_default=False)] = None,
    out: Annotated[Path | None, typer.Option(help="Write bench.json and PNG plots to this folder.", show_default=False)] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Two small workloads, one repeat of the slow baselines (a few minutes on 2 cores).")] = False,
    repeats: Annotated[int | None, typer.Option(min=1, help="Timed runs per method and workload (default 5, quick 3).", show_default=False)] = None,
    slow_repeats: Annotated[int | None, typer.Option(min=1, help="Timed runs of the generation and per-field baselines (default 2, quick 1).", show_default=False)] = None,
    methods: Annotated[str | None, typer.Option(help=f"Comma-separated subset of: {', '.join(METHODS)}.", show_default=False)] = None,
    workloads: Annotated[str | None, typer.Option(help="Comma-separated workload names to keep.", show_default=False)] = None,
    model: Annotated[str | None, typer.Option(help="A local model folder, a .gguf file or a hub id (default: the bundled model).", show_default=False)] = None,
    threads: Annotated[int | None, typer.Option(min=1, help="torch threads (default: torch's own choice; use 1 on a machine shared with other CPU-heavy jobs).", show_default=False)] = None,
    dtype: Annotated[str, typer.Option(help="Model dtype.")] = "float32",
) -> None:
    """Compare decisionflow with JSON generation, grammar-constrained generation and row-scoring baselines."""
    from rich.console import Console

    err = Console(stderr=True)
    data_dir = data if data is not None else default_data_dir()
    if not (data_dir / "pcd_presets").is_dir():
        err.print(f"no pcd_presets folder in {data_dir}: pass --data DIR or set DECISIONFLOW_DATA", markup=False)
        raise typer.Exit(2)
    repeats = repeats or (3 if quick else 5)
    slow_repeats = min(slow_repeats or (1 if quick else 2), repeats)
    chosen = [m.strip() for m in methods.split(",")] if methods else list(METHODS)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise typer.BadParameter(f"unknown method {unknown[0]!r} (known: {', '.join(METHODS)})", param_hint="--methods")
    selected = build_workloads(data_dir, quick=quick)
    if workloads:
        keep = {w.strip() for w in workloads.split(",")}
        selected = [w for w in selected if w.name in keep]
        if not selected:
            raise typer.BadParameter("no workload matches", param_hint="--workloads")

    import warnings

    from transformers.utils import logging as transformers_logging

    # pcd passes `past_key_values=`, which transformers 5 still accepts with a FutureWarning per call.
    warnings.filterwarnings("ignore", category=FutureWarning)

    transformers_logging.disable_progress_bar()
    transformers_logging.set_verbosity_error()
    from .engine import Engine
    import torch

    with err.status("loading the model"):
        engine = Engine.load(model, dtype=dtype, threads=threads)
    log = lambda message: err.print(message, markup=False, highlight=False)  # noqa: E731
    settings = conditions(engine, threads=torch.get_num_threads(), dtype=dtype, repeats=repeats, slow_repeats=slow_repeats)

    def save(rows: list[dict[str, Any]], *, complete: bool = False) -> None:
        # Written after every workload, so a long run interrupted midway still leaves its results.
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            report = {"conditions": {**settings, "complete": complete}, "results": rows}
            (out / "bench.json").write_text(json.dumps(report, indent=2, default=str), encoding="utf-8")
            (out / "bench.md").write_text(markdown_table(rows), encoding="utf-8")

    began = time.perf_counter()
    rows = run_bench(engine, selected, chosen, repeats=repeats, slow_repeats=slow_repeats, log=log, on_workload=save)
    log(f"bench finished in {time.perf_counter() - began:.0f} s")
    print_table(rows)
    if out is not None:
        save(rows, complete=True)
        plots = write_plots(rows, out)
        log(f"wrote {out / 'bench.json'}, bench.md and {', '.join(p.name for p in plots)}")
