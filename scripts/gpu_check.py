"""Check and time decisionflow on a GPU in one command (a few minutes on one GPU).

    .venv/bin/python scripts/gpu_check.py --out out/gpu_check.json            # on a CUDA machine
    .venv/bin/python scripts/gpu_check.py --device cpu --interpret --smoke    # the suite's CPU smoke run

1. Kernels: every Triton kernel against its torch reference on real shapes (Qwen2.5-1.5B's: hidden
   1536, 12 query / 2 key-value heads of 128, FFN 8960), fp32 and bf16, with the maximum error.
2. Engine: the bundled SmolLM2 on the device (torch and Triton kernels) decides a small rubric as the
   CPU's float32 engine does (same answers; probabilities within a stated tolerance).
3. Timing: a Qwen2-architecture model with Qwen2.5-1.5B-Instruct's configuration and random weights
   (timing only; real token counts from the Qwen2.5 vocabulary), kernels on and off, the first 1 / 8 /
   28 fields of the support_triage preset, batch 1 and 32 requests, against greedy `generate` of the
   same JSON's length and one bare forward over the request's tokens after the cached head (the floor).

Prints one table and writes a JSON file. With `--smoke` the model is shrunk to two small layers and
the repeats to one, so the whole script runs in seconds on a CPU (with `--interpret` for the kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    parser.add_argument("--dtype", default="bfloat16", help="dtype of the timed model (bfloat16 or float16 on a GPU)")
    parser.add_argument("--interpret", action="store_true", help="run Triton kernels under TRITON_INTERPRET=1 (CPU)")
    parser.add_argument("--smoke", action="store_true", help="tiny model, one repeat: an end-to-end check of the script")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("out/gpu_check.json"))
    return parser.parse_args()


ARGS = parse_args()
if ARGS.interpret:
    # Triton reads this when the kernel modules are imported: set it before anything imports them.
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402

from decisionflow.bench.presets import first_fields, load_preset  # noqa: E402
from decisionflow.bench.qwen_vocabulary import qwen25_tokenizer  # noqa: E402
from decisionflow.runtime.backend import PackedPass, RequestContext  # noqa: E402
from decisionflow.runtime.engine import Engine, EngineOptions  # noqa: E402
from decisionflow.runtime.generation import canonical_object_tokens  # noqa: E402
from decisionflow.runtime.loading import LoadedModel  # noqa: E402
from decisionflow.spec.rubric import Rubric  # noqa: E402

QWEN25_15B = dict(
    vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
    num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6,
    tie_word_embeddings=True, use_sliding_window=False,
)
SMOKE = dict(QWEN25_15B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(call: Callable[[], Any], device: torch.device, repeats: int) -> float:
    """Median wall milliseconds of `call` after one warm-up, synchronising the device around each."""
    call()
    times = []
    for _ in range(repeats):
        sync(device)
        began = time.perf_counter()
        call()
        sync(device)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


# -- 1. kernels ---------------------------------------------------------------------------------


def check_kernels(device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    import decisionflow_kernels.reference as ref
    from decisionflow_kernels import rms_norm, rotary, swiglu, tree_attention

    shape = SMOKE if smoke else QWEN25_15B
    hidden, heads, kv_heads = shape["hidden_size"], shape["num_attention_heads"], shape["num_key_value_heads"]
    head_dim, ffn = hidden // heads, shape["intermediate_size"]
    tokens, prefix = (37, 53) if smoke else (700, 2500)
    rows: list[dict[str, Any]] = []
    for dtype, tolerance in ((torch.float32, 1e-4), (torch.bfloat16, 3e-2)):
        gen = torch.Generator(device="cpu").manual_seed(0)

        def rand(*size: int) -> torch.Tensor:
            return torch.randn(*size, generator=gen).to(device=device, dtype=dtype)

        x, residual, weight = rand(tokens, hidden), rand(tokens, hidden), rand(hidden)
        gate, up = rand(tokens, ffn), rand(tokens, ffn)
        q, k = rand(1, heads, tokens, head_dim), rand(1, kv_heads, tokens, head_dim)
        positions = torch.randint(0, 4000, (tokens,), generator=gen).to(device)
        inv_freq = (1.0 / (1e6 ** (torch.arange(0, head_dim, 2).float() / head_dim))).to(device)
        parents = [-1] + [i - 1 for i in range(1, tokens // 2)] + [tokens // 2 - 1 - (i % 5) for i in range(tokens - tokens // 2)]
        spans = tree_attention.spans_from_tree(parents, [(0, 0)] * tokens, 0).to(device)
        value, pk, pv = rand(1, kv_heads, tokens, head_dim), rand(1, kv_heads, prefix, head_dim), rand(1, kv_heads, prefix, head_dim)
        cases = {
            "rms_norm": (lambda: rms_norm.rms_norm(x, weight, 1e-6), lambda: ref.rms_norm(x, weight, 1e-6)),
            "add_rms_norm": (lambda: rms_norm.add_rms_norm(x, residual, weight, 1e-6)[0],
                             lambda: ref.add_rms_norm(x, residual, weight, 1e-6)[0]),
            "swiglu": (lambda: swiglu.swiglu(gate, up), lambda: ref.swiglu(gate, up)),
            "rotary": (lambda: rotary.rotary_embedding(q, k, positions, inv_freq, 1.0)[0],
                       lambda: ref.rotary_embedding(q, k, positions, inv_freq, 1.0)[0]),
            "tree_attention": (lambda: tree_attention.tree_attention(q, k, value, pk, pv, spans, head_dim ** -0.5),
                               lambda: ref.tree_attention(q, k, value, pk, pv, spans, head_dim ** -0.5)),
        }
        for name, (fused, reference) in cases.items():
            error = float((fused().float() - reference().float()).abs().max())
            rows.append({"kernel": name, "dtype": str(dtype).removeprefix("torch."), "max_abs_error": error,
                         "tolerance": tolerance, "ok": error <= tolerance * (10 if name == "tree_attention" else 1)})
    return rows


# -- 2. the engine on the device ------------------------------------------------------------------

SMALL = Rubric.model_validate({
    "name": "device_check",
    "fields": {
        "topic": {"kind": "choice", "question": "Topic", "options": ["billing", "delivery", "card_payment", "card_payment_fee"]},
        "refund": {"kind": "boolean", "question": "Refund asked"},
        "urgency": {"kind": "score", "question": "Urgency", "min": 0, "max": 12},
    },
})
SMALL_TEXTS = ["I was charged twice, please refund me today.", "Where is my parcel? It is two weeks late."]


def check_engine(device: torch.device, smoke: bool) -> list[dict[str, Any]]:
    """The bundled model (a tiny Qwen2-shaped one in a smoke run) on `device` against float32 on the CPU."""
    if smoke:
        cpu_model = qwen_shaped_model(torch.device("cpu"), torch.float32, smoke=True)
        reference = Engine(cpu_model, options=EngineOptions(kernels="torch"))
    else:
        reference = Engine.load(device="cpu", dtype="float32", kernels="torch", persist_heads=False)
    expected = reference.decide_many(SMALL, SMALL_TEXTS)
    rows = []
    for kernels in ("torch", "triton"):
        try:
            if smoke:
                engine = Engine(LoadedModel(reference.loaded.model.to(device), reference.tokenizer, "tiny"),
                                options=EngineOptions(kernels=kernels))
            else:
                engine = Engine.load(device=str(device), dtype="float32", kernels=kernels, persist_heads=False)
            got = engine.decide_many(SMALL, SMALL_TEXTS)
        except Exception as error:  # noqa: BLE001 - reported as a failed check, the script goes on
            rows.append({"kernels": kernels, "ok": False, "error": f"{type(error).__name__}: {error}"})
            continue
        worst = max(abs(g.fields[n].probabilities[label] - e.fields[n].probabilities[label])
                    for g, e in zip(got, expected) for n in e.fields for label in e.fields[n].probabilities)
        same = all(g.value == e.value for g, e in zip(got, expected))
        rows.append({"kernels": got[0].stats.kernels, "device": got[0].stats.device, "same_answers": same,
                     "max_probability_gap": worst, "passes": got[0].stats.forward_passes,
                     "ok": same and worst < 2e-3})
    return rows


# -- 3. timing ------------------------------------------------------------------------------------


def qwen_shaped_model(device: torch.device, dtype: torch.dtype, smoke: bool) -> LoadedModel:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**(SMOKE if smoke else QWEN25_15B))
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype).eval()
    return LoadedModel(model, qwen25_tokenizer(), "Qwen2.5-1.5B-Instruct configuration, random weights")


def time_engine(loaded: LoadedModel, device: torch.device, repeats: int, smoke: bool) -> list[dict[str, Any]]:
    preset = load_preset("support_triage")
    text = preset.context if not smoke else preset.context[:200]
    batch_texts = [f"{text}\n(ticket {i})" for i in range(32 if not smoke else 2)]
    engines = {kernels: Engine(loaded, options=EngineOptions(kernels=kernels)) for kernels in ("torch", "triton")}
    rows: list[dict[str, Any]] = []
    for count in ((1, 8, 28) if not smoke else (2,)):
        rubric = first_fields(preset.rubric, count)
        base = engines["torch"]
        compiled, _ = base.compile(rubric)
        request = compiled.request_tokens(text)
        head = base.backend.prefill_head(list(compiled.head_tokens))

        def floor() -> Any:
            packed = PackedPass()
            last = -1
            for token in request:
                last = packed.add(token, parent=last, request=0)
            return base.backend.run_pass(head, [RequestContext()], packed, [last])

        floor_ms = timed(floor, device, repeats)
        answer_tokens = canonical_object_tokens(compiled)
        prompt = torch.tensor([list(compiled.head_tokens) + request], device=device)

        def generate() -> Any:
            with torch.inference_mode():
                return loaded.model.generate(
                    input_ids=prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                    max_new_tokens=answer_tokens, min_new_tokens=answer_tokens,
                    pad_token_id=loaded.tokenizer.pad_token_id, temperature=None, top_p=None, top_k=None,
                )

        generate_ms = timed(generate, device, max(1, repeats // 2))
        for kernels, engine in engines.items():
            try:
                engine.decide(rubric, text)
            except Exception as error:  # noqa: BLE001 - e.g. Triton missing: recorded, others go on
                rows.append({"fields": count, "kernels": kernels, "available": False, "reason": str(error)})
                continue
            single = engine.decide(rubric, text)
            one_ms = timed(lambda e=engine: e.decide(rubric, text), device, repeats)
            many_ms = timed(lambda e=engine: e.decide_many(rubric, batch_texts), device, max(1, repeats // 2))
            sequential_ms = one_ms * len(batch_texts)
            rows.append({
                "fields": count, "kernels": single.stats.kernels, "available": True,
                "passes": single.stats.forward_passes, "request_tokens": len(request),
                "head_tokens": len(compiled.head_tokens), "ms_batch1": one_ms, "floor_ms": floor_ms,
                "x_floor": one_ms / floor_ms, "generate_ms": generate_ms, "generated_tokens": answer_tokens,
                "x_faster_than_generate": generate_ms / one_ms, "batch": len(batch_texts), "ms_batch": many_ms,
                "throughput_vs_sequential": sequential_ms / many_ms,
            })
    return rows


def print_tables(report: dict[str, Any]) -> None:
    print("kernels vs references")
    for row in report["kernels"]:
        print(f"  {row['kernel']:15s} {row['dtype']:9s} max|err| {row['max_abs_error']:.2e}  {'ok' if row['ok'] else 'FAIL'}")
    print("engine on the device vs float32 on the CPU")
    for row in report["engine"]:
        print("  " + json.dumps(row))
    print("timing (median ms)")
    header = f"  {'fields':>6} {'kernels':16} {'passes':>6} {'batch1':>9} {'floor':>9} {'x floor':>8} {'generate':>10} {'x gen':>7} {'batch':>5} {'ms batch':>9} {'x seq':>6}"
    print(header)
    for row in report["timing"]:
        if not row.get("available"):
            print(f"  {row['fields']:>6} {row['kernels']:16} unavailable: {row['reason'][:80]}")
            continue
        print(f"  {row['fields']:>6} {row['kernels']:16} {row['passes']:>6} {row['ms_batch1']:>9.1f} {row['floor_ms']:>9.1f} "
              f"{row['x_floor']:>8.2f} {row['generate_ms']:>10.1f} {row['x_faster_than_generate']:>7.1f} "
              f"{row['batch']:>5} {row['ms_batch']:>9.1f} {row['throughput_vs_sequential']:>6.1f}")


def main() -> int:
    device = torch.device(ARGS.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu --interpret --smoke for the CPU smoke run", file=sys.stderr)
        return 2
    dtype = getattr(torch, ARGS.dtype)
    repeats = 1 if ARGS.smoke else ARGS.repeats
    began = time.perf_counter()
    report: dict[str, Any] = {
        "conditions": {
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu",
            "torch": torch.__version__, "dtype": ARGS.dtype, "smoke": ARGS.smoke, "interpret": ARGS.interpret,
            "repeats": repeats, "model": "Qwen2 architecture, Qwen2.5-1.5B-Instruct configuration, random weights"
            if not ARGS.smoke else "Qwen2 architecture, 2 small layers (smoke run)",
        },
        "kernels": check_kernels(device, ARGS.smoke),
        "engine": check_engine(device, ARGS.smoke),
    }
    report["timing"] = time_engine(qwen_shaped_model(device, dtype, ARGS.smoke), device, repeats, ARGS.smoke)
    report["conditions"]["seconds"] = round(time.perf_counter() - began, 1)
    print_tables(report)
    ARGS.out.parent.mkdir(parents=True, exist_ok=True)
    ARGS.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {ARGS.out}")
    failed = [r for r in report["kernels"] + report["engine"] if not r.get("ok")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
