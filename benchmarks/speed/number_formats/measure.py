"""Time one decoder layer's projections of the bundled model in each number format the CPU offers.

    .venv/bin/python -m benchmarks.speed.number_formats.measure [--tokens 400] [--repeats 50] [--out FILE]

SmolLM2-135M's projections per layer (q and o: 576x576; k and v: 192x576; gate and up: 1536x576;
down: 576x1536) at a pass of `--tokens` tokens, as: float32 (plain and oneDNN-packed, the engine's
default), bfloat16 (plain and packed), int8 weight-only with bfloat16 activations
(`aten._weight_int8pack_mm`), and int8 dynamic quantization (`torch.ao`'s per-tensor activations,
VNNI products). Weights are random (time does not depend on values). Medians would hide nothing here:
each row is the mean of `--repeats` warm calls, all formats in one process. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch

from benchmarks.common import write_results

PROJECTIONS = {"q": (576, 576), "k": (192, 576), "v": (192, 576), "o": (576, 576),
               "gate": (1536, 576), "up": (1536, 576), "down": (576, 1536)}


def mean_ms(call, repeats: int) -> float:
    for _ in range(5):
        call()
    began = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - began) / repeats * 1000


def projection(kind: str, weight: torch.Tensor, x: torch.Tensor):
    if kind == "float32":
        return lambda: torch.nn.functional.linear(x, weight)
    if kind == "float32 packed":
        packed = weight.to_mkldnn()
        return lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], "")
    if kind == "bfloat16":
        w, a = weight.bfloat16(), x.bfloat16()
        return lambda: torch.nn.functional.linear(a, w)
    if kind == "bfloat16 packed":
        w, a = weight.bfloat16().to_mkldnn(), x.bfloat16()
        return lambda: torch.ops.mkldnn._linear_pointwise(a, w, None, "none", [], "")
    if kind == "int8 weight-only":
        scales = weight.abs().amax(dim=1) / 127
        quantized = torch.round(weight / scales[:, None]).to(torch.int8)
        a, s = x.bfloat16(), scales.bfloat16()
        return lambda: torch.ops.aten._weight_int8pack_mm(a, quantized, s)
    if kind == "int8 dynamic":
        linear = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=False)
        linear.weight.data = weight
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.ao's deprecation notices
            model = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(linear), {torch.nn.Linear}, dtype=torch.qint8)
        return lambda: model(x)
    raise ValueError(kind)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--out", type=Path, help="write the times as JSON here")
    args = parser.parse_args()
    torch.manual_seed(0)
    kinds = ["float32", "float32 packed", "bfloat16", "bfloat16 packed", "int8 weight-only", "int8 dynamic"]
    print(f"one layer's seven projections at {args.tokens} tokens, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}\n\n| format | ms | vs float32 packed |\n| --- | ---: | ---: |")
    times = {}
    for kind in kinds:
        total = 0.0
        for out_features, in_features in PROJECTIONS.values():
            weight = torch.randn(out_features, in_features) * 0.02
            x = torch.randn(args.tokens, in_features)
            total += mean_ms(projection(kind, weight, x), args.repeats)
        times[kind] = total
    for kind in kinds:
        print(f"| {kind} | {times[kind]:.2f} | {times['float32 packed'] / times[kind]:.2f}x |")
    write_results(args.out, {"tokens": args.tokens, "repeats": args.repeats, "projections": PROJECTIONS,
                             "ms_per_layer": times,
                             "speed_vs_float32_packed": {kind: times["float32 packed"] / times[kind] for kind in kinds}},
                  conditions={"dtype": "each format in turn: " + ", ".join(times)})


if __name__ == "__main__":
    main()
