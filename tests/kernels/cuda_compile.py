"""Compiles every kernel for real NVIDIA targets, without a GPU: Triton's own compiler and the ptxas
its wheel ships, on the shapes the runtime launches. Run as a script (the kernels must not be
imported under the interpreter); prints one JSON line per kernel build.

    python tests/kernels/cuda_compile.py [90:bf16,80:bf16,80:fp32]

(H100/H200 and A100 in bf16, and fp32 where a model runs unconverted; `75:fp16` for T4-class GPUs.)
"""

from __future__ import annotations

import json
import os
import sys

os.environ.pop("TRITON_INTERPRET", None)
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import decisionflow_kernels.rms_norm as rms_norm  # noqa: E402
import decisionflow_kernels.rotary as rotary  # noqa: E402
import decisionflow_kernels.swiglu as swiglu  # noqa: E402
import decisionflow_kernels.tree_attention as tree_attention  # noqa: E402

FLOAT_SCALARS = {"eps", "qk_scale", "attention_scaling"}


def signature(kernel, dtype: str, pointers: dict[str, str]) -> dict[str, str]:
    """Argument types by the kernels' naming: UPPER names are tensors (of `dtype` unless named in
    `pointers`), float scalars are named, everything else is an int32 size or stride."""
    types = {}
    for param in kernel.params:
        if param.is_constexpr:
            types[param.name] = "constexpr"
        elif param.name.isupper():
            types[param.name] = pointers.get(param.name, f"*{dtype}")
        else:
            types[param.name] = "fp32" if param.name in FLOAT_SCALARS else "i32"
    return types


def builds(dtype: str):
    """(name, kernel, signature, constexprs, options) for one dtype, at the shapes of a 1.5B Qwen2 model."""
    head_dim = 128
    block_d, block_m, block_n = tree_attention._blocks(head_dim, 2 if dtype != "fp32" else 4)
    yield ("rms_norm", rms_norm._rms_norm_kernel, signature(rms_norm._rms_norm_kernel, dtype, {}),
           {"HAS_RESIDUAL": True, "BLOCK": triton.next_power_of_2(1536)}, {"num_warps": 4, "enable_fp_fusion": False})
    yield ("swiglu", swiglu._swiglu_kernel, signature(swiglu._swiglu_kernel, dtype, {}),
           {"BLOCK": swiglu.BLOCK}, {"num_warps": 4, "enable_fp_fusion": False})
    yield ("rotary", rotary._rotary_kernel,
           signature(rotary._rotary_kernel, dtype, {"POSITIONS": "*i64", "INV_FREQ": "*fp32"}),
           {"BLOCK_QH": 16, "BLOCK_KH": 2, "BLOCK_HALF": head_dim // 2}, {"num_warps": 4, "enable_fp_fusion": False})
    yield ("tree_attention", tree_attention._tree_attention_kernel,
           signature(tree_attention._tree_attention_kernel, dtype, {"SPANS": "*i32"}),
           {"HEAD_DIM": head_dim, "BLOCK_D": block_d, "BLOCK_M": block_m, "BLOCK_N": block_n,
            "PRECISION": "ieee" if dtype == "fp32" else "tf32", "WIDEN": False},
           {"num_warps": 4, "num_stages": 2, "enable_fp_fusion": True})


def main(builds_wanted: list[tuple[int, str]]) -> None:
    for capability, dtype in builds_wanted:
        for name, kernel, types, constants, options in builds(dtype):
            source = ASTSource(fn=kernel, signature=types, constexprs=constants)
            compiled = triton.compile(source, target=GPUTarget("cuda", capability, 32), options=options)
            ptx = compiled.asm["ptx"]
            print(json.dumps({
                "kernel": name, "dtype": dtype, "sm": capability, "shared_bytes": compiled.metadata.shared,
                "approx_trig": "sin.approx" in ptx or "cos.approx" in ptx, "tensor_cores": "mma" in ptx,
            }), flush=True)


DEFAULT = "90:bf16,80:bf16,80:fp32"

if __name__ == "__main__":
    wanted = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    main([(int(sm), dtype) for sm, dtype in (pair.split(":") for pair in wanted.split(","))])
