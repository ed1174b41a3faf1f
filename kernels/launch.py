"""What every launcher shares: where a kernel may run, and on which device it is launched.

A Triton kernel runs on a GPU, or on CPU tensors under Triton's interpreter (`TRITON_INTERPRET=1`,
which must be set before the kernel modules are imported: `triton.jit` reads it when it decorates).
Launchers check this up front so a wrong device is a plain error naming the kernel, not a driver
failure deep inside Triton.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from triton.runtime.interpreter import InterpretedFunction


def interpreted(kernel: object) -> bool:
    """Whether `kernel` was decorated under the interpreter (and so runs on CPU tensors)."""
    return isinstance(kernel, InterpretedFunction)


def check_tensors(name: str, kernel: object, **tensors: torch.Tensor) -> torch.device:
    """The one device all `tensors` share, checked to be one `kernel` can run on."""
    devices = {label: tensor.device for label, tensor in tensors.items()}
    first = next(iter(devices.values()))
    strays = {label: str(device) for label, device in devices.items() if device != first}
    if strays:
        raise ValueError(f"{name}: every tensor must be on {first}, but {strays}")
    if first.type == "cpu" and not interpreted(kernel):
        raise RuntimeError(
            f"{name}: Triton kernels need a GPU; for CPU tensors set TRITON_INTERPRET=1 before "
            "importing decisionflow_kernels, or call the torch reference (decisionflow_kernels.reference)"
        )
    return first


@contextlib.contextmanager
def on_device(device: torch.device) -> Iterator[None]:
    """Launch on `device`: Triton launches on the current CUDA device, not the tensors' one."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            yield
    else:
        yield


def check_last_dim_contiguous(name: str, **tensors: torch.Tensor) -> None:
    for label, tensor in tensors.items():
        if tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
            raise ValueError(f"{name}: {label} must be contiguous in its last dimension, got strides {tensor.stride()}")
