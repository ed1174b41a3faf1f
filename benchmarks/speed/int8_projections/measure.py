"""Trial: the decoder's projections as int8 products where bfloat16 has no AMX, the rest of the pass in
bfloat16. Without AMX a layer's bfloat16 projections take 14.4 ms at 400 tokens against 3.9 ms as int8
(`benchmarks/speed/number_formats/results.json`), so int8 is the one format that could lift the lead there.

Variants (weights: int8 per output channel, scale = row max / 127):
- `per_tensor`: torch's dynamic quantized linear (fbgemm; one activation scale per call, 7-bit range);
- `per_token`: one activation scale per token, `torch._int_mm` (int8 x int8 -> int32), scaled back;
- `per_token_no_down`: the same with the MLP's down projection left in bfloat16.

`--part presets`: warm medians of 5 requests on the five preset workloads, bfloat16 against the variant,
answers and the largest probability difference. `--part dev`: every set's dev rows (BANKING77 and
CLINC150: the first 400 labelled ones) decided zero-shot both ways: accuracy, McNemar's p, agreement.

    ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 .venv/bin/python -m benchmarks.speed.int8_projections.measure --variant per_token
    .venv/bin/python -m benchmarks.speed.int8_projections.measure --variant per_token --part dev
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import ROOT, SETS, labelled, write_results

WORKLOADS = ("support_triage", "fintech_fraud", "code_security", "high_cardinality_255", "model_routing_route")
DEV_LIMIT = {"banking77": 400, "clinc150": 400}


def quantize_projections(model, variant: str) -> None:
    """Give every decoder projection (but the down projection under `per_token_no_down`) int8 weights and
    route its products through them."""
    from decisionflow.runtime.passes import decoder

    skipped = {id(layer.mlp.down_proj) for layer in model.model.layers} if variant == "per_token_no_down" else set()
    for module in model.model.layers.modules():
        if not isinstance(module, decoder.Linear) or id(module) in skipped:
            continue
        weight = module.weight.detach().float()
        scales = (weight.abs().amax(dim=1) / 127).clamp_min(1e-12)
        if variant == "per_tensor":
            quantized = torch.quantize_per_channel(weight, scales.double(), torch.zeros(weight.shape[0], dtype=torch.long),
                                                   0, torch.qint8)
            module.int8 = torch.ops.quantized.linear_prepack(quantized, None if module.bias is None else module.bias.float())
        else:
            module.int8 = (torch.round(weight / scales[:, None]).to(torch.int8).t().contiguous(), scales[None, :])
    plain = decoder.Linear.forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        int8 = getattr(self, "int8", None)
        if int8 is None:
            return plain(self, x)
        flat = x.reshape(-1, x.shape[-1]).float()
        if variant == "per_tensor":
            y = torch.ops.quantized.linear_dynamic(flat, int8, True)
        else:
            weight, weight_scales = int8
            token_scales = flat.abs().amax(dim=1, keepdim=True).clamp_min(1e-8) / 127
            tokens = torch.round(flat / token_scales).to(torch.int8)
            rows = tokens.shape[0]
            if rows <= 16:  # _int_mm wants more than 16 rows
                tokens = torch.cat([tokens, tokens.new_zeros(17 - rows, tokens.shape[1])])
            y = torch._int_mm(tokens, weight)[:rows].float() * token_scales * weight_scales
            if self.bias is not None:
                y = y + self.bias.float()
        return y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])

    decoder.Linear.forward = forward


def presets(engine) -> dict:
    from decisionflow.bench.presets import default_data_dir
    from decisionflow.bench.workloads import build_workloads

    workloads = {workload.name: workload for workload in build_workloads(default_data_dir())}

    def warm(name: str):
        workload = workloads[name]
        for _ in range(2):
            engine.decide(workload.rubric, workload.payload)
        times = []
        for _ in range(5):
            began = time.perf_counter()
            decision = engine.decide(workload.rubric, workload.payload)
            times.append((time.perf_counter() - began) * 1000)
        return statistics.median(times), decision

    return {name: warm(name) for name in WORKLOADS}


def dev_answers(engine) -> dict:
    from decisionflow.spec import load_rubric

    answers = {}
    for name, (rubric_path, field, _) in SETS.items():
        rubric = load_rubric(ROOT / rubric_path)
        rows = [row for row in labelled(name, "dev") if row.gold[field] in rubric.fields[field].labels]
        rows = rows[: DEV_LIMIT.get(name, len(rows))]
        decided = engine.decide_many(rubric, [row.text for row in rows])
        answers[name] = {"gold": [row.gold[field] for row in rows], "answers": [d.fields[field].value for d in decided]}
    return answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", choices=("per_tensor", "per_token", "per_token_no_down"), default="per_token")
    parser.add_argument("--part", choices=("presets", "dev"), default="presets")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from decisionflow.runtime.engine import Engine
    from decisionflow.stats import mcnemar_exact

    engine = Engine.load(dtype="bfloat16")
    read = presets if args.part == "presets" else dev_answers
    plain = read(engine)
    quantize_projections(engine.loaded.model, args.variant)
    int8 = read(engine)
    results = {}
    for name in plain:
        if args.part == "presets":
            (plain_ms, a), (int8_ms, b) = plain[name], int8[name]
            same = sum(a.fields[f].value == b.fields[f].value for f in a.fields)
            gap = max(abs(a.fields[f].probabilities[k] - b.fields[f].probabilities.get(k, 0.0))
                      for f in a.fields for k in a.fields[f].probabilities)
            results[name] = {"bfloat16_ms": round(plain_ms), "int8_ms": round(int8_ms), "same_answers": same,
                             "fields": len(a.fields), "largest_probability_difference": round(gap, 3)}
        else:
            gold, a, b = plain[name]["gold"], plain[name]["answers"], int8[name]["answers"]
            right_a = [x == g for x, g in zip(a, gold)]
            right_b = [x == g for x, g in zip(b, gold)]
            only_a = sum(x and not y for x, y in zip(right_a, right_b))
            only_b = sum(y and not x for x, y in zip(right_a, right_b))
            results[name] = {"rows": len(gold), "bfloat16_accuracy": sum(right_a) / len(gold),
                             "int8_accuracy": sum(right_b) / len(gold), "right_only_bfloat16": only_a,
                             "right_only_int8": only_b, "mcnemar_p": mcnemar_exact(only_a, only_b),
                             "agreement": sum(x == y for x, y in zip(a, b)) / len(gold)}
        print(name, results[name], flush=True)
    write_results(args.out, {"variant": args.variant, "part": args.part, "results": results},
                  conditions={"dtype": f"bfloat16 against int8 projections ({args.variant})"})


if __name__ == "__main__":
    main()
