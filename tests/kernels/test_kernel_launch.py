"""What every launcher checks before it launches: one device, and a device the kernel can run on."""

from __future__ import annotations

import pytest
import torch
from kernel_checks import INTERPRETED, rms_norm_kernel

from decisionflow_kernels import launch


def test_a_compiled_kernel_refuses_cpu_tensors_by_name():
    compiled_kernel = object()  # anything but an interpreted kernel: what triton.jit gives without TRITON_INTERPRET
    with pytest.raises(RuntimeError, match="rms_norm: Triton kernels need a GPU; for CPU tensors set TRITON_INTERPRET=1"):
        launch.check_tensors("rms_norm", compiled_kernel, x=torch.zeros(2))


def test_tensors_on_different_devices_are_named():
    with pytest.raises(ValueError, match=r"rms_norm: every tensor must be on cpu, but \{'weight': 'meta'\}"):
        launch.check_tensors("rms_norm", rms_norm_kernel._rms_norm_kernel, x=torch.zeros(2), weight=torch.zeros(2, device="meta"))


def test_the_kernels_run_the_way_the_tests_were_started():
    """Interpreted under TRITON_INTERPRET=1 (the default here), compiled for CUDA under TRITON_INTERPRET=0."""
    assert launch.interpreted(rms_norm_kernel._rms_norm_kernel) == INTERPRETED
