"""The GPU check script runs end to end on the CPU (kernels under the interpreter, a tiny model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.model, pytest.mark.triton]


def test_gpu_check_smoke_run_on_the_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--interpret", "--smoke",
         "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=900,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert {row["kernel"] for row in report["kernels"]} == {"rms_norm", "add_rms_norm", "swiglu", "rotary", "tree_attention"}
    assert all(row["ok"] for row in report["kernels"] + report["engine"])
    assert {row["kernels"].split("+")[0] for row in report["engine"]} == {"torch", "triton"}
    timed = [row for row in report["timing"] if row["available"]]
    assert {row["kernels"].split("+")[0] for row in timed} == {"torch", "triton"}
    assert all(row["passes"] == 2 and row["floor_ms"] > 0 and row["generate_ms"] > 0 for row in timed)
    assert "timing (median ms)" in run.stdout
